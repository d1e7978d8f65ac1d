"""The same module as core.commands, under the name older imports use (a leading underscore: not a command)."""
import sys

from core import commands

sys.modules[__name__] = commands
