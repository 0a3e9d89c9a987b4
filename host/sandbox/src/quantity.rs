//! CPU and memory amounts as users write them: numbers or Kubernetes-style quantities.

use serde_json::Value;

/// CPU cores: `2`, `0.5`, `"1.5"`, `"500m"`.
pub fn parse_cpu(value: &Value) -> Result<f64, String> {
    let cores = match value {
        Value::Number(n) => n.as_f64().ok_or("not a number")?,
        Value::String(s) => {
            let s = s.trim();
            match s.strip_suffix('m') {
                Some(milli) => milli.parse::<f64>().map_err(|_| format!("{s:?} is not a CPU amount"))? / 1000.0,
                None => s.parse::<f64>().map_err(|_| format!("{s:?} is not a CPU amount"))?,
            }
        }
        other => return Err(format!("{other} is not a CPU amount")),
    };
    if !(cores.is_finite() && cores > 0.0 && cores <= 1024.0) {
        return Err(format!("{cores} cores is out of range (0, 1024]"));
    }
    Ok(cores)
}

/// Memory in bytes: `1073741824`, `"512Mi"`, `"2Gi"`, `"1G"`, `"256M"`, `"1g"` — at least
/// 4 MiB, less than any process needs.
pub fn parse_memory(value: &Value) -> Result<u64, String> {
    let bytes = parse_bytes(value)?;
    if bytes < 4 * 1024 * 1024 {
        return Err(format!("{bytes} bytes is too little memory for a sandbox (at least 4Mi)"));
    }
    Ok(bytes)
}

/// A size in bytes, written like memory (`"64Ki"`, `"2Gi"`, `1000`), with no lower bound.
pub fn parse_bytes(value: &Value) -> Result<u64, String> {
    let bytes = match value {
        Value::Number(n) => n.as_u64().ok_or_else(|| format!("{n} is not a whole number of bytes"))?,
        Value::String(s) => {
            let s = s.trim();
            let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
            let (number, unit) = s.split_at(split);
            let number: f64 = number.parse().map_err(|_| format!("{s:?} is not a memory amount"))?;
            let factor: f64 = match unit {
                "" => 1.0,
                "Ki" => 1024.0,
                "k" | "K" | "kb" | "KB" => 1000.0,
                "Mi" => 1024.0 * 1024.0,
                "Gi" => 1024.0 * 1024.0 * 1024.0,
                "Ti" => 1024f64.powi(4),
                "M" | "m" | "MB" | "mb" => 1e6,
                "G" | "g" | "GB" | "gb" => 1e9,
                "T" | "TB" => 1e12,
                _ => return Err(format!("{s:?}: unknown unit {unit:?} (use Ki, Mi, Gi, K, M, G)")),
            };
            (number * factor) as u64
        }
        other => return Err(format!("{other} is not a memory amount")),
    };
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cpu_amounts() {
        assert_eq!(parse_cpu(&json!(2)).unwrap(), 2.0);
        assert_eq!(parse_cpu(&json!("500m")).unwrap(), 0.5);
        assert_eq!(parse_cpu(&json!("1.5")).unwrap(), 1.5);
        assert!(parse_cpu(&json!(0)).unwrap_err().contains("out of range"));
        assert!(parse_cpu(&json!("lots")).unwrap_err().contains("not a CPU amount"));
    }

    #[test]
    fn memory_amounts() {
        assert_eq!(parse_memory(&json!("512Mi")).unwrap(), 512 << 20);
        assert_eq!(parse_memory(&json!("2Gi")).unwrap(), 2 << 30);
        assert_eq!(parse_memory(&json!("1G")).unwrap(), 1_000_000_000);
        assert_eq!(
            parse_memory(&json!("64Ki")).unwrap_err(),
            "65536 bytes is too little memory for a sandbox (at least 4Mi)"
        );
        assert_eq!(parse_memory(&json!(67108864)).unwrap(), 64 << 20);
        assert!(parse_memory(&json!("3 parsecs")).unwrap_err().contains("unknown unit"));
    }
}
