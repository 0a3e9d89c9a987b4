//! The driver's configuration (`config.get`): its mode and the bounds on what it shows.

use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Screenshots; the model points on a 0-1000 grid.
    Coords,
    /// Screenshots with numbered boxes on the interactive elements, plus their list.
    Marks,
    /// The accessibility tree as text (`[id] role "name"`), for text-only models.
    Ax,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub mode: Mode,
    /// Screenshots wider than this are scaled down to it (CSS pixels stay the page's).
    pub screenshot_width: Option<u32>,
    /// JPEG at this quality instead of PNG.
    pub jpeg_quality: Option<u8>,
    /// Whether observations carry a screenshot (not in `ax` mode unless asked).
    pub screenshots: bool,
    /// At most this many elements listed (marks) or nodes (ax); the rest are counted.
    pub max_elements: usize,
    /// At most this many characters of listing.
    pub max_text: usize,
}

/// The keys the driver reads; any other is refused by name.
const KEYS: &[&str] = &["mode", "screenshot_width", "jpeg_quality", "screenshots", "max_elements", "max_text"];

impl Settings {
    /// From the configuration JSON (an object of known keys, checked as every harness's
    /// configuration is); an unknown key or mode, or a bad value, is an error naming the key.
    pub fn parse(json: &str) -> Result<Settings, String> {
        let v = orchard_harness_config::parse("browser driver", json, &[KEYS])?;
        let mode = match v.get("mode").and_then(Value::as_str).unwrap_or("coords") {
            "coords" => Mode::Coords,
            "marks" | "som" => Mode::Marks,
            "ax" | "accessibility" | "a11y" => Mode::Ax,
            other => return Err(format!("mode: {other:?} is not coords, marks or ax")),
        };
        let number = |key: &str, lo: u64, hi: u64| -> Result<Option<u64>, String> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(n) => match n.as_u64() {
                    Some(n) if (lo..=hi).contains(&n) => Ok(Some(n)),
                    _ => Err(format!("{key}: expected a whole number from {lo} to {hi}, got {n}")),
                },
            }
        };
        let screenshots = match v.get("screenshots") {
            None | Some(Value::Null) => mode != Mode::Ax,
            Some(Value::Bool(b)) => *b,
            Some(other) => return Err(format!("screenshots: expected true or false, got {other}")),
        };
        Ok(Settings {
            mode,
            screenshot_width: number("screenshot_width", 64, 8192)?.map(|n| n as u32),
            jpeg_quality: number("jpeg_quality", 1, 100)?.map(|n| n as u8),
            screenshots,
            max_elements: number("max_elements", 1, 10_000)?.unwrap_or(150) as usize,
            max_text: number("max_text", 200, 1_000_000)?.unwrap_or(12_000) as usize,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_modes_and_errors() {
        let s = Settings::parse("{}").unwrap();
        assert_eq!((s.mode, s.screenshots, s.max_elements), (Mode::Coords, true, 150));
        let s = Settings::parse(r#"{"mode": "ax"}"#).unwrap();
        assert_eq!((s.mode, s.screenshots), (Mode::Ax, false));
        let s = Settings::parse(r#"{"mode": "marks", "screenshot_width": 640, "jpeg_quality": 70}"#).unwrap();
        assert_eq!((s.mode, s.screenshot_width, s.jpeg_quality), (Mode::Marks, Some(640), Some(70)));
        assert!(Settings::parse(r#"{"mode": "vision"}"#).unwrap_err().starts_with("mode"));
        assert!(Settings::parse(r#"{"screenshot_width": 5}"#).unwrap_err().starts_with("screenshot_width"));
        assert!(Settings::parse(r#"{"screenshots": "yes"}"#).unwrap_err().starts_with("screenshots"));
        let unknown = Settings::parse(r#"{"mode": "ax", "screenshot": true}"#).unwrap_err();
        assert!(
            unknown.contains("unknown key `screenshot` (known: ") && unknown.contains(" screenshots)"),
            "{unknown}"
        );
        assert!(Settings::parse("[1]").unwrap_err().contains("must be a JSON object"));
    }
}
