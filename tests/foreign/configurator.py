# The "poor man's configurator" of public GPT trainers, written here: every --key=value
# argument overrides a global of the script that exec()s this file.
import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    assert arg.startswith("--"), arg
    key, val = arg[2:].split("=")
    assert key in globals(), f"unknown config key {key}"
    try:
        val = literal_eval(val)
    except (SyntaxError, ValueError):
        pass
    globals()[key] = val
