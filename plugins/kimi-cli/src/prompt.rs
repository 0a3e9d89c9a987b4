//! Kimi-CLI 1.52's system prompt: its `system.md` (`release/`, unchanged), rendered as Kimi-CLI
//! renders it — Jinja with `${NAME}` variables, `trim_blocks`, `lstrip_blocks`, the final newline
//! kept, the template stripped first, an unknown variable an error — with the variables it
//! computes (`KIMI_NOW`, `KIMI_WORK_DIR`, `KIMI_WORK_DIR_LS`, `KIMI_AGENTS_MD`, `KIMI_SKILLS`,
//! `KIMI_ADDITIONAL_DIRS_INFO`, `KIMI_OS`, `KIMI_SHELL`) and the agent's `ROLE_ADDITIONAL`.
//! `system_prompt_template` takes your own copy of a `system.md` instead, rendered the same way.

use std::collections::BTreeMap;

use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, UndefinedBehavior};

/// Kimi-CLI 1.52's `agents/default/system.md`.
pub const RELEASE_TEMPLATE: &str = include_str!("../release/system.md");

/// The `ROLE_ADDITIONAL` of Kimi-CLI's `coder` subagent.
pub const SUBAGENT_ROLE: &str = include_str!("../release/coder_role.md");

/// `KIMI_SKILLS` for Kimi-CLI's built-in skills, their files under `root` (its installation's
/// `kimi_cli/skills`).
pub fn builtin_skills(root: &str) -> String {
    include_str!("../release/builtin_skills.md").replace("${SKILLS_ROOT}", root.trim_end_matches('/'))
}

/// Renders a system prompt template with `vars`; `Err` says what is wrong with the template.
pub fn render(template: &str, vars: &BTreeMap<&str, String>) -> Result<String, String> {
    let mut env = Environment::new();
    let syntax = SyntaxConfig::builder()
        .variable_delimiters("${", "}")
        .build()
        .map_err(|e| format!("system prompt syntax: {e}"))?;
    env.set_syntax(syntax);
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(true);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.render_str(template.trim(), vars).map_err(|e| format!("system prompt template: {e:#}"))
}

/// The working directory's first two levels as a tree (`├──`, `└──`), from `find -printf '%y %P'`
/// lines (`d src`, `f src/a.py`): what the template's `KIMI_WORK_DIR_LS` shows.
pub fn tree(find_lines: &str) -> String {
    if find_lines.trim().is_empty() {
        return "(empty directory)".into();
    }
    let mut top: Vec<(String, Vec<String>)> = Vec::new();
    let mut entries: Vec<&str> = find_lines.lines().filter_map(|l| l.get(2..)).filter(|p| !p.is_empty()).collect();
    entries.sort();
    for path in entries {
        match path.split_once('/') {
            None => top.push((path.to_string(), Vec::new())),
            Some((dir, child)) => match top.iter_mut().find(|(name, _)| name == dir) {
                Some((_, children)) => children.push(child.to_string()),
                None => top.push((dir.to_string(), vec![child.to_string()])),
            },
        }
    }
    let mut out = Vec::new();
    for (i, (name, children)) in top.iter().enumerate() {
        let last = i + 1 == top.len();
        out.push(format!("{}{name}", if last { "└── " } else { "├── " }));
        for (j, child) in children.iter().enumerate() {
            let lead = if last { "    " } else { "│   " };
            out.push(format!("{lead}{}{child}", if j + 1 == children.len() { "└── " } else { "├── " }));
        }
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> BTreeMap<&'static str, String> {
        [
            ("ROLE_ADDITIONAL", String::new()),
            ("KIMI_OS", "Linux".into()),
            ("KIMI_SHELL", "bash (`/bin/bash`)".into()),
            ("KIMI_NOW", "2026-12-05T10:00:00+00:00".into()),
            ("KIMI_WORK_DIR", "/w".into()),
            ("KIMI_WORK_DIR_LS", tree("")),
            ("KIMI_AGENTS_MD", String::new()),
            ("KIMI_SKILLS", builtin_skills("/opt/k/skills/")),
            ("KIMI_ADDITIONAL_DIRS_INFO", String::new()),
        ]
        .into()
    }

    #[test]
    fn the_release_template_renders_as_kimi_cli_renders_it() {
        let full = render(RELEASE_TEMPLATE, &vars()).unwrap();
        assert!(
            full.starts_with("You are Kimi Code CLI, an interactive general AI agent running on a user's computer.")
        );
        assert!(full.contains(
            "You are running on **Linux**. The Shell tool executes commands using **bash (`/bin/bash`)**.\n"
        ));
        assert!(full.contains("```\n(empty directory)\n```"), "{full}");
        assert!(full.contains("  - Path: /opt/k/skills/kimi-cli-help/SKILL.md"), "{full}");
        assert!(!full.contains("${") && !full.contains("{%") && !full.contains("Additional Directories"));
        let mut missing = vars();
        missing.remove("KIMI_NOW");
        assert!(render(RELEASE_TEMPLATE, &missing).unwrap_err().contains("undefined"));
        assert_eq!(render("a{% if KIMI_OS == \"Windows\" %} win{% endif +%}\nb", &vars()).unwrap(), "a\nb");
    }

    #[test]
    fn the_listing_is_a_two_level_tree() {
        assert_eq!(tree("f app.py\n"), "└── app.py");
        assert_eq!(
            tree("d src\nf src/b.py\nf src/a.py\nf README.md\n"),
            "├── README.md\n└── src\n    ├── a.py\n    └── b.py"
        );
        assert_eq!(tree(""), "(empty directory)");
    }
}
