//! Key names as pyautogui (and so OSWorld's actions) writes them, to X keysyms.

/// The keysym of a pyautogui key name (case-insensitive for the named keys; a single character
/// is that character's own keysym), or `None` for a name it does not know.
pub fn keysym(name: &str) -> Option<u32> {
    let mut chars = name.chars();
    if let (Some(c), None) = (chars.next(), chars.next()) {
        return Some(char_keysym(c));
    }
    let lower = name.to_ascii_lowercase();
    let named = match lower.as_str() {
        "enter" | "return" => 0xff0d,
        "tab" => 0xff09,
        "space" => 0x20,
        "backspace" => 0xff08,
        "delete" | "del" => 0xffff,
        "esc" | "escape" => 0xff1b,
        "up" => 0xff52,
        "down" => 0xff54,
        "left" => 0xff51,
        "right" => 0xff53,
        "home" => 0xff50,
        "end" => 0xff57,
        "pageup" | "pgup" => 0xff55,
        "pagedown" | "pgdn" => 0xff56,
        "insert" => 0xff63,
        "shift" | "shiftleft" => 0xffe1,
        "shiftright" => 0xffe2,
        "ctrl" | "ctrlleft" | "control" => 0xffe3,
        "ctrlright" => 0xffe4,
        "alt" | "altleft" | "option" | "optionleft" => 0xffe9,
        "altright" | "optionright" => 0xffea,
        "win" | "winleft" | "super" | "command" | "cmd" | "meta" => 0xffeb,
        "winright" => 0xffec,
        "capslock" => 0xffe5,
        "numlock" => 0xff7f,
        "scrolllock" => 0xff14,
        "printscreen" | "prntscrn" | "prtsc" | "prtscr" | "print" => 0xff61,
        "pause" => 0xff13,
        "apps" | "menu" => 0xff67,
        "add" => 0xffab,
        "subtract" => 0xffad,
        "multiply" => 0xffaa,
        "divide" => 0xffaf,
        "decimal" => 0xffae,
        "volumemute" => 0x1008ff12,
        "volumedown" => 0x1008ff11,
        "volumeup" => 0x1008ff13,
        "playpause" => 0x1008ff14,
        other => {
            if let Some(n) = other.strip_prefix("num").and_then(|d| d.parse::<u32>().ok()).filter(|n| *n <= 9) {
                0xffb0 + n
            } else if let Some(n) =
                other.strip_prefix('f').and_then(|d| d.parse::<u32>().ok()).filter(|n| (1..=24).contains(n))
            {
                0xffbe + n - 1
            } else {
                return None;
            }
        }
    };
    Some(named)
}

/// The keysym that types `c`.
pub fn char_keysym(c: char) -> u32 {
    match c {
        '\n' | '\r' => 0xff0d,
        '\t' => 0xff09,
        '\u{8}' => 0xff08,
        ' '..='~' | '\u{a0}'..='\u{ff}' => c as u32,
        other => 0x0100_0000 | other as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_characters_and_unknowns() {
        assert_eq!(keysym("Enter"), Some(0xff0d));
        assert_eq!(keysym("ctrl"), Some(0xffe3));
        assert_eq!(keysym("f5"), Some(0xffc2));
        assert_eq!(keysym("num7"), Some(0xffb7));
        assert_eq!(keysym("a"), Some(0x61));
        assert_eq!(keysym("A"), Some(0x41));
        assert_eq!(keysym("é"), Some(0xe9));
        assert_eq!(keysym("€"), Some(0x0100_20ac));
        assert_eq!(keysym("f25"), None);
        assert_eq!(keysym("hyperdrive"), None);
    }
}
