"""tvm-hetero: Apache TVM passes that spread one DNN over several devices.

Importing the package is cheap (no TVM import); the submodules load TVM when used.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
