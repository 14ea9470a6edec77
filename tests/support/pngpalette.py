"""A screenshot as a palette PNG of at most 256 colours, in pure Python, for the docs' pictures.

Chromium writes true-colour PNGs; a page of text is a few flat colours and
the shades of their anti-aliased edges, so a palette of the most used 256
colours (every other colour drawn as its nearest) looks the same and takes
a third of the bytes. Used only when RELAY_SCREENSHOTS asks for pictures to
keep (tests.support.browser); it takes a few seconds a picture.
"""

import struct
import zlib
from collections import Counter

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def palette_png(png: bytes, colours: int = 256) -> bytes:
    width, height, pixel_bytes, pixels = _decode(png)
    size = width * height
    counts = Counter(pixels[index:index + 3] for index in range(0, size * pixel_bytes, pixel_bytes))
    palette = [colour for colour, _ in counts.most_common(colours)]
    index_of = {colour: _nearest(colour, palette) for colour in counts}
    rows = bytearray()
    for y in range(height):
        start = y * width * pixel_bytes
        rows.append(0)
        rows.extend(index_of[pixels[at:at + 3]] for at in range(start, start + width * pixel_bytes, pixel_bytes))
    return b"".join((SIGNATURE, _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 3, 0, 0, 0)),
                     _chunk(b"PLTE", b"".join(palette)), _chunk(b"IDAT", zlib.compress(bytes(rows), 9)),
                     _chunk(b"IEND", b"")))


def _nearest(colour: bytes, palette: list[bytes]) -> int:
    red, green, blue = colour
    return min(range(len(palette)), key=lambda index: (2 * (palette[index][0] - red) ** 2
                                                       + 4 * (palette[index][1] - green) ** 2
                                                       + 3 * (palette[index][2] - blue) ** 2))


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _decode(png: bytes) -> tuple[int, int, int, bytes]:
    """Width, height, bytes a pixel and the unfiltered pixels of an 8-bit RGB or RGBA PNG."""
    if not png.startswith(SIGNATURE):
        raise ValueError("not a PNG")
    position, header, data = len(SIGNATURE), b"", bytearray()
    while position < len(png):
        (length,) = struct.unpack(">I", png[position:position + 4])
        kind, body = png[position + 4:position + 8], png[position + 8:position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            data.extend(body)
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or colour_type not in (2, 6) or interlace:
        raise ValueError(f"only 8-bit RGB or RGBA PNGs, not depth {depth}, colour type {colour_type}")
    pixel_bytes = 3 if colour_type == 2 else 4
    stride = width * pixel_bytes
    raw = zlib.decompress(bytes(data))
    pixels, previous = bytearray(), bytearray(stride)
    for y in range(height):
        previous = _unfiltered(raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)]),
                               previous, pixel_bytes)
        pixels.extend(previous)
    return width, height, pixel_bytes, bytes(pixels)


def _unfiltered(kind: int, line: bytearray, previous: bytearray, pixel_bytes: int) -> bytearray:
    """One row of pixels from its filtered bytes and the row above (the PNG filters: sub, up, average, Paeth)."""
    stride = len(line)
    if kind == 1:
        for index in range(pixel_bytes, stride):
            line[index] = (line[index] + line[index - pixel_bytes]) & 255
    elif kind == 2:
        line = bytearray((value + above) & 255 for value, above in zip(line, previous, strict=True))
    elif kind == 3:
        for index in range(stride):
            left = line[index - pixel_bytes] if index >= pixel_bytes else 0
            line[index] = (line[index] + ((left + previous[index]) >> 1)) & 255
    elif kind == 4:
        for index in range(stride):
            left = line[index - pixel_bytes] if index >= pixel_bytes else 0
            above, corner = previous[index], (previous[index - pixel_bytes] if index >= pixel_bytes else 0)
            guess = left + above - corner
            near_left, near_above, near_corner = abs(guess - left), abs(guess - above), abs(guess - corner)
            line[index] = (line[index] + (left if near_left <= near_above and near_left <= near_corner
                                          else above if near_above <= near_corner else corner)) & 255
    return line
