"""Every exit status of every command, and the words each kind of output gives a verdict, in one
table.

`git bisect run` reads 0 as good, 125 as skip, any other status up to 127 as bad, and anything
above 127 as "stop the bisect": so only a verdict may be 1-127, and whatever is not a verdict (a
usage error, an input that cannot be read, a bug) is above 127 and stops a bisect instead of
passing for an answer.
"""

import textwrap

GOOD, BAD, UNDECIDED = 0, 1, 125  # the verdict's (good; also "done" for the other commands)
ERROR = 128  # no verdict: usage, input, output or internal error (the message says)
INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
OUTPUT_CLOSED = 141  # the output's reader went away (| head): 128 + SIGPIPE, as shells say

# code: (the verdict line's word, results.json's word, the JSON verdict's word (git bisect's),
# what --help says of it)
TABLE = {
    GOOD: (
        "good",
        "PASS",
        "good",
        "good (check, results --verdict: PASS, watch); done (every other command)",
    ),
    BAD: ("bad", "FAIL", "bad", "bad (check, results --verdict: FAIL, watch)"),
    UNDECIDED: (
        "cannot decide",
        "UNDECIDED",
        "skip",
        "cannot decide: the inputs were read but cannot tell (git bisect run: skip)",
    ),
    ERROR: (
        None,
        None,
        None,
        "error, no verdict: a usage error, an input missing, unreadable or not usable, an "
        "output that cannot be written, an internal error (the message says which; git "
        "bisect run stops)",
    ),
    INTERRUPTED: (None, None, None, "interrupted (Ctrl-C)"),
    OUTPUT_CLOSED: (
        None,
        None,
        None,
        "the output was closed before all of it was written (| head); a command "
        "with a verdict exits with the verdict instead",
    ),
}


def word(code):
    """The verdict line's word: 'good', 'bad', 'cannot decide'."""
    return TABLE[code][0]


def result_word(code):
    """results.json's and the reproducers' word: 'PASS', 'FAIL', 'UNDECIDED'."""
    return TABLE[code][1]


def code_of_result(result):
    """The exit status of a results.json verdict word; UNDECIDED for any other word."""
    return {TABLE[c][1]: c for c in (GOOD, BAD)}.get(result, UNDECIDED)


def bisect_word(code):
    """The JSON verdict's word, git bisect's: 'good', 'bad', 'skip'."""
    return TABLE[code][2]


# What the statuses mean for a command that gives no verdict (analyze, export, plot, ...).
NO_VERDICT = {
    GOOD: "done",
    OUTPUT_CLOSED: "the output was closed before all of it was written (| head)",
}


def help_text(verdict=True, more=None):
    """The exit status table, as --help of every command ends: all of it for a command that
    gives a verdict (verdict=True), else the statuses such a command can exit with; more:
    {status: meaning} of a command's own."""
    rows = [
        (code, what if verdict else NO_VERDICT.get(code, what))
        for code, (_, _, _, what) in TABLE.items()
        if verdict or code not in (BAD, UNDECIDED)
    ]
    rows = sorted(rows + list((more or {}).items()))
    return "exit status:\n" + "\n".join(
        textwrap.fill(what, 80, initial_indent=f"  {code:<5}", subsequent_indent=" " * 7)
        for code, what in rows
    )
