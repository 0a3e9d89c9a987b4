//! What a plugin may send through `cdp`: anything but the domains that would let it reach past
//! its tab — the browser itself, other targets, request interception, storage of other origins,
//! streams of files, certificate overrides — and download behaviour.

/// Why `method` is refused for plugins, or `None`.
pub fn refused(method: &str) -> Option<String> {
    const DOMAINS: [&str; 6] = ["Browser.", "Target.", "Fetch.", "Storage.", "IO.", "Security."];
    if let Some(domain) = DOMAINS.iter().find(|d| method.starts_with(**d)) {
        return Some(format!("{method}: the {} domain is not open to plugins", domain.trim_end_matches('.')));
    }
    if method == "Page.setDownloadBehavior" {
        return Some(format!("{method}: downloads are the host's to decide"));
    }
    if method.is_empty() || !method.contains('.') || method.len() > 128 {
        return Some(format!("{method:?} is not a DevTools method (Domain.method)"));
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn domains_past_the_tab_are_refused() {
        for m in ["Browser.close", "Target.getTargets", "Fetch.enable", "Storage.clearDataForOrigin", "IO.read"] {
            assert!(super::refused(m).is_some(), "{m}");
        }
        for m in ["Security.setIgnoreCertificateErrors", "Page.setDownloadBehavior", "", "nodot"] {
            assert!(super::refused(m).is_some(), "{m}");
        }
        for m in ["Page.navigate", "Runtime.evaluate", "Input.dispatchMouseEvent", "Accessibility.getFullAXTree"] {
            assert_eq!(super::refused(m), None, "{m}");
        }
    }
}
