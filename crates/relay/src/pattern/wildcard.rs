//! The glob of `wildcard` matchers: `*` matches any run of characters,
//! `\*` is a literal star and `\\` a literal backslash; no other escapes.

/// A parsed wildcard: the literal pieces between stars.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Glob {
    /// Literal text between the stars; `pieces.len() - 1` stars.
    pieces: Vec<String>,
}

impl Glob {
    /// Parses `text`, refusing what EventBridge refuses.
    pub fn parse(text: &str) -> Result<Glob, String> {
        let mut pieces = vec![String::new()];
        let mut chars = text.chars().enumerate().peekable();
        let mut last_was_star = false;
        while let Some((pos, c)) = chars.next() {
            match c {
                '*' => {
                    if last_was_star {
                        return Err(format!("Consecutive wildcard characters at pos {pos}"));
                    }
                    pieces.push(String::new());
                    last_was_star = true;
                    continue;
                }
                '\\' => match chars.next() {
                    Some((_, e @ ('*' | '\\'))) => pieces.last_mut().expect("never empty").push(e),
                    _ => return Err(format!("Invalid escape character at pos {pos}")),
                },
                other => pieces.last_mut().expect("never empty").push(other),
            }
            last_was_star = false;
        }
        Ok(Glob { pieces })
    }

    /// Whether `s` matches the whole glob.
    pub fn matches(&self, s: &str) -> bool {
        let (first, rest) = self.pieces.split_first().expect("never empty");
        let Some(mut tail) = s.strip_prefix(first.as_str()) else {
            return false;
        };
        let Some((last, middle)) = rest.split_last() else {
            return tail.is_empty();
        };
        for piece in middle {
            match tail.find(piece.as_str()) {
                Some(at) => tail = &tail[at + piece.len()..],
                None => return false,
            }
        }
        // The last piece must end the string; leftmost-first matching of the
        // middle pieces leaves the most room for it.
        tail.len() >= last.len() && tail.ends_with(last.as_str())
    }
}
