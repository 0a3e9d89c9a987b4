//! The driver's configuration (`config.get`): its action space, coordinates, observation and
//! the bounds on what it shows. Every key is known; an unknown one is refused by name
//! (`orchard_harness_config::parse`).

use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionSpace {
    /// OSWorld's `computer_13`: one `computer` tool taking `{action_type, parameters}`.
    Computer13,
    /// OSWorld's `pyautogui`: Python code run on the desktop.
    Pyautogui,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coordinates {
    /// Screen pixels.
    Absolute,
    /// 0-1000 on both axes, whatever the screen (Qwen-VL's).
    Grid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    pub screenshot: bool,
    pub tree: bool,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub action_space: ActionSpace,
    pub coordinates: Coordinates,
    pub observation: Observation,
    /// Screenshots wider than this are scaled down to it.
    pub screenshot_width: Option<u32>,
    /// JPEG at this quality instead of PNG.
    pub jpeg_quality: Option<u8>,
    /// At most this many accessibility nodes.
    pub max_elements: u32,
    /// At most this many characters of tree.
    pub max_text: usize,
    /// How long to let the desktop settle after an action before looking.
    pub settle_ms: u64,
}

const KEYS: &[&str] = &[
    "action_space",
    "coordinates",
    "observation",
    "screenshot_width",
    "jpeg_quality",
    "max_elements",
    "max_text",
    "settle_ms",
];

impl Settings {
    pub fn parse(json: &str) -> Result<Settings, String> {
        // A JSON object of known keys, checked as every harness's configuration is.
        let v = orchard_harness_config::parse("desktop driver", json, &[KEYS])?;
        Settings::from_object(&v).map_err(|e| format!("desktop driver config: {e}"))
    }

    fn from_object(v: &Value) -> Result<Settings, String> {
        let text = |key: &str, default: &'static str| -> Result<String, String> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(default.to_string()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(other) => Err(format!("{key}: expected a string, got {other}")),
            }
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
        let action_space = match text("action_space", "computer_13")?.as_str() {
            "computer_13" => ActionSpace::Computer13,
            "pyautogui" => ActionSpace::Pyautogui,
            other => return Err(format!("action_space: {other:?} is not computer_13 or pyautogui")),
        };
        let coordinates = match text("coordinates", "absolute")?.as_str() {
            "absolute" => Coordinates::Absolute,
            "grid" | "relative" => Coordinates::Grid,
            other => return Err(format!("coordinates: {other:?} is not absolute or grid")),
        };
        let observation = match text("observation", "screenshot")?.as_str() {
            "screenshot" => Observation { screenshot: true, tree: false },
            "a11y_tree" => Observation { screenshot: false, tree: true },
            "screenshot_a11y_tree" => Observation { screenshot: true, tree: true },
            other => {
                return Err(format!("observation: {other:?} is not screenshot, a11y_tree or screenshot_a11y_tree"));
            }
        };
        Ok(Settings {
            action_space,
            coordinates,
            observation,
            screenshot_width: number("screenshot_width", 64, 8192)?.map(|n| n as u32),
            jpeg_quality: number("jpeg_quality", 1, 100)?.map(|n| n as u8),
            max_elements: number("max_elements", 1, 100_000)?.unwrap_or(300) as u32,
            max_text: number("max_text", 200, 1_000_000)?.unwrap_or(12_000) as usize,
            settle_ms: number("settle_ms", 0, 10_000)?.unwrap_or(300),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_choices_and_refusals() {
        let s = Settings::parse("{}").unwrap();
        assert_eq!((s.action_space, s.coordinates), (ActionSpace::Computer13, Coordinates::Absolute));
        assert_eq!(s.observation, Observation { screenshot: true, tree: false });
        let s = Settings::parse(
            r#"{"action_space": "pyautogui", "observation": "screenshot_a11y_tree", "coordinates": "grid"}"#,
        )
        .unwrap();
        assert_eq!((s.action_space, s.coordinates), (ActionSpace::Pyautogui, Coordinates::Grid));
        assert!(s.observation.tree && s.observation.screenshot);
        assert!(Settings::parse(r#"{"mode": "x"}"#).unwrap_err().contains("unknown key `mode`"));
        assert!(
            Settings::parse(r#"{"observation": "video"}"#)
                .unwrap_err()
                .starts_with("desktop driver config: observation")
        );
        assert!(
            Settings::parse(r#"{"jpeg_quality": 0}"#).unwrap_err().starts_with("desktop driver config: jpeg_quality")
        );
    }
}
