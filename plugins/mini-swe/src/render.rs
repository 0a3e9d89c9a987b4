//! Templates rendered as mini-swe-agent renders them: Jinja with undefined variables an error
//! (`StrictUndefined`), the final newline dropped, and `tojson` as Jinja2's — Python's
//! `json.dumps` (ASCII only, `", "` and `": "` between items) with `<`, `>`, `&` and `'` escaped.

use minijinja::value::{Value as Jv, ValueKind};
use minijinja::{Environment, UndefinedBehavior};
use serde_json::Value;

/// Renders `template` with `vars`; `Err` says which template and why.
pub fn render(name: &str, template: &str, vars: &Value) -> Result<String, String> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.add_filter("tojson", tojson);
    env.render_str(template, Jv::from_serialize(vars)).map_err(|e| format!("{name}: {e:#}"))
}

fn tojson(value: Jv) -> Result<Jv, minijinja::Error> {
    let mut out = String::new();
    python_json(&value, &mut out);
    let safe = out.replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026").replace('\'', "\\u0027");
    Ok(Jv::from_safe_string(safe))
}

/// `json.dumps(value)` with Python's defaults.
fn python_json(value: &Jv, out: &mut String) {
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&value.to_string()),
        ValueKind::String | ValueKind::Bytes | ValueKind::Plain | ValueKind::Invalid => {
            orchard_harness_kit::python_json::string(
                value.as_str().map(str::to_string).unwrap_or_else(|| value.to_string()).as_str(),
                out,
            )
        }
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in value.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_json(&item, out);
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in value.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                orchard_harness_kit::python_json::string(&key.to_string(), out);
                out.push_str(": ");
                python_json(&value.get_item(&key).unwrap_or_default(), out);
            }
            out.push('}');
        }
        _ => orchard_harness_kit::python_json::string(&value.to_string(), out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rendering_follows_jinja2_as_mini_swe_agent_configures_it() {
        let vars = json!({"task": "fix it", "output": {"output": "a<b> & 'c' é 😀\n", "returncode": 0}});
        assert_eq!(render("t", "Task: {{task}}\n", &vars).unwrap(), "Task: fix it", "final newline dropped");
        assert_eq!(
            render("t", "{{ output.output | tojson }}", &vars).unwrap(),
            r#""a\u003cb\u003e \u0026 \u0027c\u0027 \u00e9 \ud83d\ude00\n""#
        );
        let err = render("instance_template", "{{ nope }}", &vars).unwrap_err();
        assert!(err.starts_with("instance_template: ") && err.contains("undefined"), "{err}");
        assert_eq!(render("t", "{{ output.output[:3] }}|{{ output.output | length }}", &vars).unwrap(), "a<b|15");
        assert_eq!(render("t", "{% if finish is defined %}x{% else %}y{% endif %}", &vars).unwrap(), "y");
    }
}
