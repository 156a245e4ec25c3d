"""File-name encoding of session keys: injective, reversible, never a path of its own.

`encode_component` keeps `[A-Za-z0-9_-]` and writes every other UTF-8 byte as `%XX` with
uppercase hex, so a key can never smuggle a `/`, a `..` or a leading dot into a path, and two
different texts never encode alike. A name that would pass the file-system limit is cut and gets
`_` plus the FNV-1a 64-bit hash of the whole text (octos' rule, so its legacy files still match).
"""

from __future__ import annotations

from typing import Final

FNV_OFFSET_BASIS: Final = 0xCBF29CE484222325
FNV_PRIME: Final = 0x100000001B3
_MASK_64: Final = 0xFFFFFFFFFFFFFFFF

#: Longest encoded name kept whole (octos: 200 characters minus the `_` + 16 hex digit suffix).
#: With the suffix and our longest extension (`.{n}.archive.jsonl`) a name stays far below the
#: 255-byte limit of common file systems.
MAX_ENCODED_NAME: Final = 183
HASH_SUFFIX_LEN: Final = 17

_SAFE_BYTES: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ENCODED_BYTE: Final = tuple(
    chr(byte) if byte in _SAFE_BYTES else f"%{byte:02X}" for byte in range(256)
)
_HEX_DIGITS: Final = frozenset("0123456789ABCDEFabcdef")


def fnv1a_64(data: bytes) -> int:
    """FNV-1a, 64 bits: stable across versions and platforms (not a security hash)."""
    value = FNV_OFFSET_BASIS
    for byte in data:
        value = ((value ^ byte) * FNV_PRIME) & _MASK_64
    return value


def _utf8(text: str) -> bytes:
    # surrogatepass: a lone surrogate (legal in JSON strings) must still encode, not crash.
    return text.encode("utf-8", "surrogatepass")


def encode_component(text: str) -> str:
    """The whole text percent-encoded; never cut."""
    return "".join(_ENCODED_BYTE[byte] for byte in _utf8(text))


def decode_component(name: str) -> str:
    """Inverse of `encode_component`; raises ValueError for a name it could not have made."""
    out = bytearray()
    index = 0
    while index < len(name):
        char = name[index]
        if char == "%":
            digits = name[index + 1 : index + 3]
            if len(digits) != 2 or not set(digits) <= _HEX_DIGITS:
                raise ValueError(f"malformed escape at {index} in {name!r}")
            out.append(int(digits, 16))
            index += 3
            continue
        if len(char.encode()) != 1 or ord(char) not in _SAFE_BYTES:
            raise ValueError(f"{char!r} cannot appear in an encoded name ({name!r})")
        out.append(ord(char))
        index += 1
    return out.decode("utf-8", "surrogatepass")


def bounded_name(text: str, max_len: int = MAX_ENCODED_NAME) -> str:
    """Encoded text, cut and given `_{FNV-1a hex}` once the encoding reaches `max_len`.

    Same rule as octos: bytes are added (whole `%XX` escapes at a time) while the name is
    shorter than `max_len`; if bytes remain after that, the hash of the whole text follows. A
    whole name is at most `max_len + 2` characters and a cut one exactly `HASH_SUFFIX_LEN` longer
    than its prefix (at least `max_len + HASH_SUFFIX_LEN`), so the two can never be confused.
    """
    data = _utf8(text)
    if len(data) * 3 <= max_len:
        # No escape is longer than 3 characters: nothing can be cut (the common, short key).
        return "".join(map(_ENCODED_BYTE.__getitem__, data))
    pieces: list[str] = []
    length = 0
    for byte in data:
        if length >= max_len:
            return "".join(pieces) + f"_{fnv1a_64(data):016X}"
        piece = _ENCODED_BYTE[byte]
        pieces.append(piece)
        length += len(piece)
    return "".join(pieces)


def is_cut_name(name: str, max_len: int = MAX_ENCODED_NAME) -> bool:
    """Whether `bounded_name` cut this name (it then cannot be decoded back)."""
    if len(name) < max_len + HASH_SUFFIX_LEN:
        return False
    suffix = name[-HASH_SUFFIX_LEN:]
    return suffix[0] == "_" and all(c in "0123456789ABCDEF" for c in suffix[1:])
