"""The one exception type that means "the user gave us something we cannot use"."""


class InputError(Exception):
    """Bad input: the message is one line naming the file (or option) and the problem.

    The CLI prints it alone and exits with code 2; library callers can catch it.
    """



def closest_names(pattern: str, names) -> str:
    """', '-joined names nearest to `pattern` (case-insensitive difflib over the names and the words in them, down
    to camel-case pieces and pairs of them, as a pattern may be part of a name), or 'none': for an error about a
    name that matches nothing."""
    import difflib
    import re

    candidates: dict[str, str] = {}
    for name in names:
        words = [name]
        for identifier in re.findall(r"[A-Za-z][A-Za-z0-9_]{2,}", name):
            words.append(identifier)
            for part in identifier.split("_"):
                pieces = re.findall(r"[A-Z]+[a-z0-9]*|[a-z0-9]+", part)
                words += [part, *pieces, *(a + b for a, b in zip(pieces, pieces[1:]))]
        for word in words:
            if len(word) >= 3:
                candidates.setdefault(word.lower(), word if len(word) <= 80 else word[:77] + "...")
    close = difflib.get_close_matches(pattern.lower(), list(candidates), n=3, cutoff=0.6)
    return ", ".join(candidates[c] for c in close) or "none"
