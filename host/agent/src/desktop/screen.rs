//! The screen, read through the X protocol: pixels as PNG, and the pointer.

use anyhow::Context;
use x11rb::connection::Connection;
use x11rb::protocol::xproto::{ConnectionExt, ImageFormat};

/// The screen's pixels, RGB, row by row.
pub struct Frame {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
}

/// Reads the whole screen of `display`.
pub fn capture(display: &str) -> anyhow::Result<Frame> {
    let (conn, screen_num) = x11rb::connect(Some(display)).with_context(|| format!("connecting to {display}"))?;
    let screen = &conn.setup().roots[screen_num];
    let (width, height) = (screen.width_in_pixels, screen.height_in_pixels);
    let image = conn
        .get_image(ImageFormat::Z_PIXMAP, screen.root, 0, 0, width, height, !0)?
        .reply()
        .context("reading the screen")?;
    let depth = image.depth;
    let pixels = image.data;
    let count = width as usize * height as usize;
    let mut rgb = Vec::with_capacity(count * 3);
    match depth {
        24 | 32 if pixels.len() >= count * 4 => {
            for px in pixels.chunks_exact(4).take(count) {
                rgb.extend_from_slice(&[px[2], px[1], px[0]]);
            }
        }
        16 if pixels.len() >= count * 2 => {
            for px in pixels.chunks_exact(2).take(count) {
                let v = u16::from_le_bytes([px[0], px[1]]);
                let (r, g, b) = ((v >> 11) & 0x1f, (v >> 5) & 0x3f, v & 0x1f);
                rgb.extend_from_slice(&[(r << 3 | r >> 2) as u8, (g << 2 | g >> 4) as u8, (b << 3 | b >> 2) as u8]);
            }
        }
        other => anyhow::bail!("a screen of depth {other} ({} bytes for {width}x{height})", pixels.len()),
    }
    Ok(Frame { width: width as u32, height: height as u32, rgb })
}

impl Frame {
    /// Scaled down to at most `max_width` (aspect kept; each pixel the mean of those it covers).
    pub fn fit(self, max_width: Option<u32>) -> Frame {
        let Some(max) = max_width.filter(|m| *m >= 1 && *m < self.width) else { return self };
        let (w, h) = (max, ((self.height as u64 * max as u64) / self.width as u64).max(1) as u32);
        let mut rgb = Vec::with_capacity(w as usize * h as usize * 3);
        for y in 0..h {
            let (y0, y1) = (y * self.height / h, ((y + 1) * self.height / h).max(y * self.height / h + 1));
            for x in 0..w {
                let (x0, x1) = (x * self.width / w, ((x + 1) * self.width / w).max(x * self.width / w + 1));
                let mut sum = [0u32; 3];
                for sy in y0..y1 {
                    for sx in x0..x1 {
                        let i = (sy * self.width + sx) as usize * 3;
                        for (total, channel) in sum.iter_mut().zip(&self.rgb[i..i + 3]) {
                            *total += *channel as u32;
                        }
                    }
                }
                let n = (y1 - y0) * (x1 - x0);
                rgb.extend(sum.iter().map(|s| (s / n) as u8));
            }
        }
        Frame { width: w, height: h, rgb }
    }

    /// As a PNG.
    pub fn png(&self) -> anyhow::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, self.width, self.height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::Fastest);
        encoder.write_header()?.write_image_data(&self.rgb)?;
        Ok(out)
    }

    /// As a JPEG of `quality` (1-100).
    pub fn jpeg(&self, quality: u8) -> anyhow::Result<Vec<u8>> {
        let mut out = Vec::new();
        let encoder = jpeg_encoder::Encoder::new(&mut out, quality.clamp(1, 100));
        let (w, h) = (u16::try_from(self.width)?, u16::try_from(self.height)?);
        encoder.encode(&self.rgb, w, h, jpeg_encoder::ColorType::Rgb)?;
        Ok(out)
    }
}

/// The whole screen of `display` as a PNG.
pub fn screenshot_png(display: &str) -> anyhow::Result<Vec<u8>> {
    capture(display)?.png()
}

/// Where the pointer is on `display`.
pub fn pointer(display: &str) -> anyhow::Result<(i16, i16)> {
    let (conn, screen_num) = x11rb::connect(Some(display)).with_context(|| format!("connecting to {display}"))?;
    let root = conn.setup().roots[screen_num].root;
    let reply = conn.query_pointer(root)?.reply()?;
    Ok((reply.root_x, reply.root_y))
}
