"""The zigzag varint, written once: Avro's int and long, and the message indexes of Confluent's
Protobuf framing use the same encoding (zigzag, then 7 bits a byte, low group first, the high
bit set on every byte but the last).

Worked example: -3 zigzags to 5, one byte ``05``; 1764417600123 zigzags to 3528835200246, six
bytes ``f6 e9 df f7 d9 66``. ``read_zigzag`` takes at most 10 bytes (64 bits) and refuses a
number that runs past the data or past 64 bits; the vectorised forms of the columnar fast paths
(formats/columnar/decode.py, encode.py) are held to these two by their property tests.
"""

from __future__ import annotations

from streamer.errors import DeserializeError


def zigzag(n: int) -> bytes:
    """One zigzag varint of a 64-bit integer, as fastavro writes an Avro long."""
    u = ((n << 1) ^ (n >> 63)) & 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while u > 0x7F:
        out.append(u & 0x7F | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def avro_string(s: str) -> bytes:
    """One Avro string (its UTF-8 length as a varint, then the bytes), as fastavro writes it."""
    b = s.encode()
    return zigzag(len(b)) + b


def read_zigzag(data: bytes, pos: int) -> tuple[int, int]:
    """Read one zigzag varint (at most 10 bytes, 64 bits); return (value, position after it)."""
    acc = shift = 0
    for byte in data[pos : pos + 10]:
        acc |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            if shift == 70 and byte > 1:
                raise DeserializeError(f"malformed varint: the number at byte {pos} does not fit in 64 bits")
            return (acc >> 1) ^ -(acc & 1), pos + shift // 7
    raise DeserializeError(f"malformed or truncated varint: no complete number of at most 10 bytes at byte {pos}")
