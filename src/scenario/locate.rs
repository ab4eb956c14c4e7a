//! Finds the line of a dotted field path (`training.lr`, `data.clients`) in YAML text, so that
//! errors found after parsing can still point at a line. Block mappings are followed by
//! indentation; a path that ends inside a flow mapping (`{a: 1}`) points at that line; a field
//! that is missing points at its parent.

/// 1-based line of `path` in `text`, or of the deepest parent found.
pub fn line_of(text: &str, path: &str) -> Option<usize> {
    let segments: Vec<&str> = path
        .split('.')
        .map(|s| s.split('[').next().unwrap_or(s))
        .filter(|s| !s.is_empty())
        .collect();
    if segments.is_empty() {
        return None;
    }
    let mut found: Option<usize> = None;
    let mut parent_indent: Option<usize> = None;
    let mut want = 0;
    for (i, line) in text.lines().enumerate() {
        let content = line.trim_start();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        let indent = line.len() - content.len();
        if let Some(p) = parent_indent {
            if indent <= p {
                break; // left the parent's block without finding the field
            }
        }
        let key_text = content.trim_start_matches("- ");
        if key_text.starts_with(&format!("{}:", segments[want])) {
            found = Some(i + 1);
            want += 1;
            if want == segments.len() {
                break;
            }
            // The rest of the path may sit in a flow mapping on this same line.
            let rest = &key_text[segments[want - 1].len() + 1..];
            if rest.trim_start().starts_with('{')
                && segments[want..]
                    .iter()
                    .all(|s| rest.contains(&format!("{s}:")))
            {
                break;
            }
            parent_indent = Some(indent);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::line_of;

    const TEXT: &str = "name: x\nrounds: 3\n# comment\ndata:\n  kind: fedem_synthetic\n  clients: 10\ntraining:\n  lr: 0.1\n  lr_schedule: {kind: multi_step, milestones: [1]}\nsampling:\n  fraction: 2\n";

    #[test]
    fn finds_nested_and_flow_fields() {
        assert_eq!(line_of(TEXT, "rounds"), Some(2));
        assert_eq!(line_of(TEXT, "data.clients"), Some(6));
        assert_eq!(line_of(TEXT, "training.lr"), Some(8));
        assert_eq!(line_of(TEXT, "training.lr_schedule.milestones"), Some(9));
        assert_eq!(line_of(TEXT, "sampling.fraction"), Some(11));
    }

    #[test]
    fn missing_field_points_at_parent() {
        assert_eq!(line_of(TEXT, "data.alpha"), Some(4));
        assert_eq!(line_of(TEXT, "nothing"), None);
    }
}
