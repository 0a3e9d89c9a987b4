//! Which files a patch touches.

/// The files a unified diff touches (`diff --git a/X b/X`, or `+++ b/X`).
pub fn patched_files(patch: &str) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    for line in patch.lines() {
        let path = if let Some(rest) = line.strip_prefix("diff --git a/") {
            rest.split(" b/").next()
        } else {
            line.strip_prefix("+++ b/")
        };
        if let Some(p) = path.map(str::trim).filter(|p| !p.is_empty())
            && !files.iter().any(|f| f == p)
        {
            files.push(p.to_string());
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patched_files_are_listed_once() {
        let patch = "diff --git a/tests/test_a.py b/tests/test_a.py\n--- a/tests/test_a.py\n+++ b/tests/test_a.py\n@@ -1 +1 @@\n\
                     diff --git a/tests/new.py b/tests/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/tests/new.py\n";
        assert_eq!(patched_files(patch), ["tests/test_a.py", "tests/new.py"]);
    }
}
