"""The command line's mistakes, each told in one usage error that says what to type instead:
argparse alone gives a misspelled command the list of every command, and an option the command
lacks the top-level usage and "unrecognized arguments"."""

import argparse
import difflib


def parse(p, argv, every):
    """p.parse_args(argv), its mistakes told as the module says. every(): the parser with every
    command (p may have only the one argv names)."""
    commands = _commands(p).choices
    if argv and not argv[0].startswith("-") and argv[0] not in commands:
        names = list(_commands(every()).choices)
        near = difflib.get_close_matches(argv[0], names, n=1)
        p.error(
            f"no command {argv[0]!r}"
            + (f": did you mean {near[0]}?" if near else f"; the commands: {', '.join(names)}")
        )
    args, extra = p.parse_known_args(argv)
    command = commands[args.cmd]
    unknown = [a.split("=", 1)[0] for a in extra if a.startswith("-") and a != "-"]
    if unknown:
        have = [
            name
            for name, q in _commands(every()).choices.items()
            if unknown[0] in q._option_string_actions
        ]
        near = difflib.get_close_matches(unknown[0], command._option_string_actions, n=1)
        command.error(
            f"{args.cmd} has no {unknown[0]} option"
            + (f": did you mean {near[0]}?" if near and not have else "")
            + (f"; {', '.join(have)} {'has' if len(have) == 1 else 'have'} it" if have else "")
        )
    if extra:
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _commands(p):
    """The subcommands' action of a parser."""
    (sub,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return sub
