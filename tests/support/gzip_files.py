"""Reading gzip files' headers in tests."""


def gzip_header_name(data: bytes) -> bytes:
    """The original file name a gzip member's header holds (RFC 1952: FNAME, after the 10 fixed bytes and any
    FEXTRA field), b"" when it holds none."""
    flags, at = data[3], 10
    if flags & 4:  # FEXTRA
        at += 2 + int.from_bytes(data[at:at + 2], "little")
    return data[at:data.index(b"\0", at)] if flags & 8 else b""
