"""The one exception type that means "the user gave us something we cannot use"."""


class InputError(Exception):
    """Bad input: the message is one line naming the file (or option) and the problem.

    The CLI prints it alone and exits with code 2; library callers can catch it.
    """
