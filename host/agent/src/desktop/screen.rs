//! The screen, read through the X protocol: pixels as PNG, and the pointer.

use anyhow::Context;
use x11rb::connection::Connection;
use x11rb::protocol::xproto::{ConnectionExt, ImageFormat};

/// The whole screen of `display` as a PNG.
pub fn screenshot_png(display: &str) -> anyhow::Result<Vec<u8>> {
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
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width as u32, height as u32);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Fast);
    encoder.write_header()?.write_image_data(&rgb)?;
    Ok(out)
}

/// Where the pointer is on `display`.
pub fn pointer(display: &str) -> anyhow::Result<(i16, i16)> {
    let (conn, screen_num) = x11rb::connect(Some(display)).with_context(|| format!("connecting to {display}"))?;
    let root = conn.setup().roots[screen_num].root;
    let reply = conn.query_pointer(root)?.reply()?;
    Ok((reply.root_x, reply.root_y))
}
