"""The frozen app's entry point (PyInstaller runs this as `hearth`).

`hearth ARGS` is the `hearth` command (hearth.cli). `hearth -m MODULE ARGS` runs a bundled
module as `python -m MODULE` would: Hearth starts helper processes that way (the device
probe, `python -m hearth.engine.ml.devices`), and in a frozen app `sys.executable` is this
program, not a Python interpreter.
"""

import runpy
import sys

if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "-m":
        module = sys.argv[2]
        sys.argv = [sys.argv[0], *sys.argv[3:]]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        sys.exit(0)
    from hearth.cli import main

    main()
