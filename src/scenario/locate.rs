//! Finds the line of a dotted field path (`training.lr`, `data.clients`) in YAML text, so that
//! errors found after parsing can still point at a line. Block mappings are followed by
//! indentation; a path that ends inside a flow mapping (`{a: 1}`) points at that line; a field
//! that is missing points at its parent.

/// 1-based line of `path` in `text`, or of the deepest parent found. A segment `name[i]`
/// is the i-th item of a block list (`- …`); in a flow list (`[…]`) it is the list's line.
pub fn line_of(text: &str, path: &str) -> Option<usize> {
    let segments: Vec<(&str, Option<usize>)> = path
        .split('.')
        .filter(|s| !s.is_empty())
        .map(|s| match s.split_once('[') {
            Some((name, index)) => (name, index.trim_end_matches(']').parse().ok()),
            None => (s, None),
        })
        .collect();
    if segments.is_empty() {
        return None;
    }
    // (line number, indentation, content) of the lines that hold something.
    let mut lines: Vec<(usize, usize, &str)> = text
        .lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let content = line.trim_start();
            let blank = content.is_empty() || content.starts_with('#');
            (!blank).then_some((i + 1, line.len() - content.len(), content))
        })
        .collect();
    let mut found: Option<usize> = None;
    let mut parent_indent: Option<usize> = None;
    let mut want = 0;
    let mut at = 0;
    while at < lines.len() {
        let (number, indent, content) = lines[at];
        if let Some(p) = parent_indent {
            if indent <= p {
                break; // left the parent's block without finding the field
            }
        }
        let key_text = content.trim_start_matches("- ");
        let (name, index) = segments[want];
        if !key_text.starts_with(&format!("{name}:")) {
            at += 1;
            continue;
        }
        found = Some(number);
        let rest = key_text[name.len() + 1..].trim_start();
        if let Some(index) = index {
            // The list's items: `- ` lines below the key, at the first item's indentation.
            let key_indent = indent + (content.len() - key_text.len());
            let mut item = None;
            let mut count = 0;
            let mut item_indent = None;
            for (k, &(_, i, c)) in lines.iter().enumerate().skip(at + 1) {
                let dash = c.starts_with("- ") || c == "-";
                if rest.starts_with('[') || i < key_indent || (i == key_indent && !dash) {
                    break;
                }
                if dash && *item_indent.get_or_insert(i) == i {
                    if count == index {
                        item = Some(k);
                        break;
                    }
                    count += 1;
                }
            }
            let Some(k) = item else { return found };
            let (number, i, c) = lines[k];
            found = Some(number);
            want += 1;
            let inside = c.trim_start_matches('-').trim_start();
            if want == segments.len() || inside.starts_with('{') {
                break;
            }
            // The item's own fields start on its line, after the dash.
            lines[k] = (number, i + (c.len() - inside.len()), inside);
            parent_indent = Some(i);
            at = k;
            continue;
        }
        want += 1;
        if want == segments.len() {
            break;
        }
        // The rest of the path may sit in a flow mapping on this same line.
        if rest.starts_with('{')
            && segments[want..]
                .iter()
                .all(|(s, _)| rest.contains(&format!("{s}:")))
        {
            break;
        }
        parent_indent = Some(indent);
        at += 1;
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
    fn list_items_are_counted() {
        let text = "model:\n  kind: layers\n  layers:\n  - {kind: conv, kernel: 5}\n  - relu\n  \
                    - kind: residual\n    layers:\n      - relu\n      - kind: conv\n        \
                    kernel: 3\n  - dense\nrounds: [1, 2]\n";
        assert_eq!(line_of(text, "model.layers[0].kernel"), Some(4));
        assert_eq!(line_of(text, "model.layers[1]"), Some(5));
        assert_eq!(line_of(text, "model.layers[2].layers"), Some(7));
        assert_eq!(line_of(text, "model.layers[2].layers[1].kernel"), Some(10));
        assert_eq!(line_of(text, "model.layers[3]"), Some(11));
        assert_eq!(line_of(text, "model.layers[9]"), Some(3));
        assert_eq!(line_of(text, "rounds[1]"), Some(12));
    }

    #[test]
    fn missing_field_points_at_parent() {
        assert_eq!(line_of(TEXT, "data.alpha"), Some(4));
        assert_eq!(line_of(TEXT, "nothing"), None);
    }
}
