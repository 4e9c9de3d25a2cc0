// Frames as the server sends them (PROTOCOL.md, "Binary: a frame").

// A frame is one image, or horizontal strips encoded in parallel by the server (`strips`:
// their byte lengths, top first, `strip_height` rows each), decoded in parallel here and
// stacked into one bitmap.
export async function decodeFrame(header, bytes) {
  const type = `image/${header.format}`;
  const lengths = header.strips || [];
  if (lengths.length === 0) return createImageBitmap(new Blob([bytes], { type }));
  let offset = 0;
  const parts = lengths.map((length) => {
    const part = bytes.subarray(offset, offset + length);
    offset += length;
    return createImageBitmap(new Blob([part], { type }));
  });
  if (offset > bytes.length) throw new Error('frame shorter than its strips');
  const strips = await Promise.all(parts);
  const stacked = new OffscreenCanvas(header.width, header.height);
  const context = stacked.getContext('2d');
  strips.forEach((strip, i) => {
    context.drawImage(strip, 0, i * header.strip_height);
    strip.close();
  });
  return stacked.transferToImageBitmap();
}
