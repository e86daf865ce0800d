"""without_native_lines: TVM's C++ log lines that tell a user nothing stay off stderr."""

import os

from tvm_hetero.runtime.native_noise import without_native_lines


def test_the_named_lines_written_to_the_descriptor_are_dropped_and_the_rest_kept(capfd):
    """Written to file descriptor 2 as TVM's C++ logging writes, not through ``sys.stderr``."""
    with without_native_lines("Unknown pragma pragma_scope", "BlockBuilder destroyed"):
        os.write(2, b"[17:38:04] codegen_cpu.cc:1183: Warning: Unknown pragma pragma_scope\n")
        os.write(2, b"a line the user needs\n")
        os.write(2, b"Warning: BlockBuilder destroyed with remaining blocks!\n")
    assert capfd.readouterr().err == "a line the user needs\n"


def test_nothing_is_written_back_where_everything_was_noise(capfd):
    with without_native_lines("noise"):
        os.write(2, b"noise\n")
    assert capfd.readouterr().err == ""
