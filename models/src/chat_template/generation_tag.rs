//! Support for transformers' `{% generation %}` … `{% endgeneration %}` block.
//!
//! transformers registers this tag (its `AssistantTracker` extension) to locate assistant
//! text for training masks; when rendering it simply outputs its body, in a scope of its
//! own. MiniJinja has no custom tags, so the tags are rewritten to `{% with %}` …
//! `{% endwith %}`, which renders its body in a new scope too, keeping the tag's whitespace
//! control markers so that the output is unchanged.

use std::borrow::Cow;

const OPEN: &str = "generation";
const CLOSE: &str = "endgeneration";

/// Returns `source` with every `generation`/`endgeneration` tag rewritten, leaving
/// expressions, comments, string literals and raw blocks untouched.
pub(super) fn rewrite_generation_tags(source: &str) -> Cow<'_, str> {
    if !source.contains(OPEN) {
        return Cow::Borrowed(source);
    }
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    let mut in_raw_block = false;
    while let Some(start) = rest.find('{') {
        let (text, tail) = rest.split_at(start);
        out.push_str(text);
        let (consumed, replacement) = if tail.starts_with("{%") {
            let Some(end) = tag_end(tail, "%}") else {
                rest = tail;
                break;
            };
            let tag = &tail[..end];
            let name = tag_name(tag);
            if in_raw_block {
                in_raw_block = name != "endraw";
                (end, None)
            } else {
                in_raw_block = name == "raw";
                let replacement = match name {
                    OPEN => Some(tag.replacen(OPEN, "with", 1)),
                    CLOSE => Some(tag.replacen(CLOSE, "endwith", 1)),
                    _ => None,
                };
                (end, replacement)
            }
        } else if in_raw_block {
            (1, None)
        } else if tail.starts_with("{{") {
            (tag_end(tail, "}}").unwrap_or(tail.len()), None)
        } else if tail.starts_with("{#") {
            (tail.find("#}").map_or(tail.len(), |end| end + 2), None)
        } else {
            (1, None)
        };
        out.push_str(replacement.as_deref().unwrap_or(&tail[..consumed]));
        rest = &tail[consumed..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// The length of the tag starting at `tag` (which opens with a two-byte delimiter), up to
/// and including `close`, skipping quoted strings; `None` when unterminated.
fn tag_end(tag: &str, close: &str) -> Option<usize> {
    let bytes = tag.as_bytes();
    let mut quote = None;
    let mut index = 2;
    while index < bytes.len() {
        let byte = bytes[index];
        match quote {
            Some(_) if byte == b'\\' => index += 1,
            Some(open) if byte == open => quote = None,
            Some(_) => {}
            None if byte == b'"' || byte == b'\'' => quote = Some(byte),
            None if tag[index..].starts_with(close) => return Some(index + close.len()),
            None => {}
        }
        index += 1;
    }
    None
}

/// The first word inside a block tag such as `{%- generation -%}`.
fn tag_name(tag: &str) -> &str {
    let inner = tag.trim_start_matches("{%").trim_start_matches(['-', '+']);
    let inner = inner.trim_start();
    let end = inner.find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_')).unwrap_or(inner.len());
    &inner[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_tags_and_keeps_whitespace_markers() {
        assert_eq!(
            rewrite_generation_tags("a{%- generation -%}b{% endgeneration +%}c"),
            "a{%- with -%}b{% endwith +%}c"
        );
    }

    #[test]
    fn leaves_strings_comments_and_raw_blocks_alone() {
        let source = concat!(
            "{{ '{% generation %}' }}{# {% generation %} #}",
            "{% raw %}{% generation %}{% endraw %}",
            "{% set x = \"%} {% generation %}\" %}",
            "{% generations %}"
        );
        assert_eq!(rewrite_generation_tags(source), source);
    }

    #[test]
    fn unterminated_input_is_returned_unchanged() {
        for source in ["{% generation", "a {% generation", "{{ 'generation", "{# generation", "{"] {
            assert_eq!(rewrite_generation_tags(source), source);
        }
    }
}
