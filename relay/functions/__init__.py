"""Functions as data: names, templates, compiled patterns and fingerprints.

Pure and I/O-light: no Redis, Docker or gevent here.
"""

from relay.functions.fingerprint import fingerprint_directory
from relay.functions.function import ActiveFunction, Function, load_function
from relay.functions.parser import check_template, parse_template
from relay.functions.patterns import Pattern, compile_pattern
from relay.functions.template import OnExpired, Rule, Schedule, Template
from relay.names import env_name_problem, function_name_problem, secret_name_problem

__all__ = [
    "ActiveFunction", "Function", "OnExpired", "Pattern", "Rule", "Schedule", "Template", "check_template",
    "compile_pattern", "env_name_problem", "fingerprint_directory", "function_name_problem", "load_function",
    "parse_template", "secret_name_problem",
]
