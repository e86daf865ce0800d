"""``optimize``: every strategy and each device alone, the promising ones timed, the fastest
kept (:mod:`tvm_hetero.optimize.search`), and the report of it
(:mod:`tvm_hetero.optimize.report`)."""
