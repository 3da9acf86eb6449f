//! Learns byte-level BPE merges from a text, for the synthetic vocabulary.
//!
//! The text is split into pre-tokens the way the Qwen2 pre-tokenizer splits it (contractions,
//! letter runs with one leading non-letter, single digits, punctuation runs, whitespace), each
//! pre-token is spelled in GPT-2's byte alphabet, and the most frequent adjacent pair is merged until
//! the wanted number of new tokens exists or no pair occurs twice.

use std::collections::{BTreeMap, HashMap};

/// GPT-2's printable stand-in for a byte: printable Latin-1 bytes map to themselves, the others to
/// U+0100 onwards in byte order.
pub(crate) fn byte_char(byte: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(byte) {
        return char::from(byte);
    }
    let rank = (0..byte).filter(|&b| !printable(b)).count() as u32;
    char::from_u32(0x100 + rank).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// Splits `text` into pre-tokens.
pub(crate) fn pre_tokenize(text: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let offset = |i: usize| chars.get(i).map_or(text.len(), |&(at, _)| at);
    let is_letter = |i: usize| chars.get(i).is_some_and(|&(_, c)| c.is_alphabetic());
    let is_digit = |i: usize| chars.get(i).is_some_and(|&(_, c)| c.is_numeric());
    let is_space = |i: usize| chars.get(i).is_some_and(|&(_, c)| c.is_whitespace());
    let is_newline = |i: usize| chars.get(i).is_some_and(|&(_, c)| c == '\n' || c == '\r');
    let is_symbol = |i: usize| i < chars.len() && !is_letter(i) && !is_digit(i) && !is_space(i);
    let run = |mut i: usize, class: &dyn Fn(usize) -> bool| {
        while class(i) {
            i += 1;
        }
        i
    };

    let mut pieces = Vec::new();
    let mut start = 0;
    while start < chars.len() {
        let end = if let Some(len) = contraction_len(&text[offset(start)..]) {
            start + len
        } else if is_letter(start) {
            run(start, &is_letter)
        } else if !is_newline(start) && !is_digit(start) && is_letter(start + 1) {
            run(start + 1, &is_letter)
        } else if is_digit(start) {
            start + 1
        } else if is_symbol(start) || (chars[start].1 == ' ' && is_symbol(start + 1)) {
            let first_symbol = if is_symbol(start) { start } else { start + 1 };
            run(run(first_symbol, &is_symbol), &is_newline)
        } else {
            let space_end = run(start, &is_space);
            let last_newline = (start..space_end).rev().find(|&i| is_newline(i));
            match last_newline {
                Some(i) => i + 1,
                None if space_end == chars.len() || space_end - start == 1 => space_end,
                // Leave the last space to prefix the next word.
                None => space_end - 1,
            }
        };
        pieces.push(&text[offset(start)..offset(end)]);
        start = end;
    }
    pieces
}

/// Length in chars of an English contraction suffix at the start of `text` ('s, 're, ...).
fn contraction_len(text: &str) -> Option<usize> {
    let rest = text.strip_prefix('\'')?;
    let lower: String = rest.chars().take(2).collect::<String>().to_ascii_lowercase();
    if lower.starts_with("re") || lower.starts_with("ve") || lower.starts_with("ll") {
        Some(3)
    } else if lower.starts_with(['s', 't', 'm', 'd']) {
        Some(2)
    } else {
        None
    }
}

/// Learned merges: pairs of token strings, in rank order, and the new tokens in creation order.
pub(crate) struct LearnedMerges {
    pub(crate) merges: Vec<(String, String)>,
    pub(crate) new_tokens: Vec<String>,
}

/// Learns merges from `text` until `max_new_tokens` tokens exist beyond the 256 byte tokens.
pub(crate) fn learn_merges(text: &str, max_new_tokens: usize) -> LearnedMerges {
    let mut symbols: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    let mut symbol_ids: HashMap<String, u32> = symbols.iter().cloned().zip(0..).collect();

    let mut word_counts: BTreeMap<&str, u64> = BTreeMap::new();
    for piece in pre_tokenize(text) {
        *word_counts.entry(piece).or_default() += 1;
    }
    let mut words: Vec<(Vec<u32>, u64)> =
        word_counts.into_iter().map(|(word, count)| (word.bytes().map(u32::from).collect(), count)).collect();

    let mut learned = LearnedMerges { merges: Vec::new(), new_tokens: Vec::new() };
    while learned.new_tokens.len() < max_new_tokens {
        let mut pair_counts: HashMap<(u32, u32), u64> = HashMap::new();
        for (word, count) in &words {
            for pair in word.windows(2) {
                *pair_counts.entry((pair[0], pair[1])).or_default() += count;
            }
        }
        // Most frequent pair; ties go to the pair of older symbols, so the result is deterministic.
        let best = pair_counts
            .into_iter()
            .filter(|&(_, count)| count >= 2)
            .max_by_key(|&(pair, count)| (count, std::cmp::Reverse(pair)));
        let Some(((left, right), _)) = best else { break };

        let joined = format!("{}{}", symbols[left as usize], symbols[right as usize]);
        let merged = match symbol_ids.get(&joined) {
            Some(&id) => id,
            None => {
                let id = symbols.len() as u32;
                symbols.push(joined.clone());
                symbol_ids.insert(joined.clone(), id);
                learned.new_tokens.push(joined);
                id
            }
        };
        learned.merges.push((symbols[left as usize].clone(), symbols[right as usize].clone()));
        for (word, _) in &mut words {
            merge_in_place(word, left, right, merged);
        }
    }
    learned
}

fn merge_in_place(word: &mut Vec<u32>, left: u32, right: u32, merged: u32) {
    let mut out = 0;
    let mut i = 0;
    while i < word.len() {
        if i + 1 < word.len() && word[i] == left && word[i + 1] == right {
            word[out] = merged;
            i += 2;
        } else {
            word[out] = word[i];
            i += 1;
        }
        out += 1;
    }
    word.truncate(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_alphabet_matches_gpt2() {
        assert_eq!(byte_char(b'A'), 'A');
        assert_eq!(byte_char(b' '), '\u{120}'); // 'Ġ'
        assert_eq!(byte_char(b'\n'), '\u{10A}'); // 'Ċ'
        assert_eq!(byte_char(0), '\u{100}');
        assert_eq!(byte_char(0xAD), '\u{143}'); // soft hyphen, the last non-printable: 'Ń'
        let all: std::collections::HashSet<char> = (0..=255u8).map(byte_char).collect();
        assert_eq!(all.len(), 256);
    }

    /// Expected splits are those of the Qwen2 pre-tokenizer regex run by Python's `regex` module.
    #[test]
    fn pre_tokens_follow_the_qwen2_split() {
        assert_eq!(
            pre_tokenize("def quicksort(arr):\n    if len(arr) <= 1:"),
            ["def", " quicksort", "(arr", "):\n", "   ", " if", " len", "(arr", ")", " <=", " ", "1", ":"]
        );
        assert_eq!(
            pre_tokenize("It's 42 we'll\n\n  end  "),
            ["It", "'s", " ", "4", "2", " we", "'ll", "\n\n", " ", " end", "  "]
        );
        assert_eq!(
            pre_tokenize("x=1e-5; y=[0x1F, 3.14]\n\t\tz  \n  w"),
            [
                "x", "=", "1", "e", "-", "5", ";", " y", "=[", "0", "x", "1", "F", ",", " ", "3", ".", "1",
                "4", "]\n", "\t", "\tz", "  \n", " ", " w"
            ]
        );
        assert_eq!(
            pre_tokenize("  leading spaces\tand\ttabs\n\n"),
            [" ", " leading", " spaces", "\tand", "\ttabs", "\n\n"]
        );
    }

    #[test]
    fn merges_pick_the_most_frequent_pair_first() {
        let learned = learn_merges("aaa aaa aaa ab ab", 3);
        // Pairs: (a,a) x6, (Ġ,a) x4, (a,b) x2 -> "aa" first.
        assert_eq!(learned.merges[0], ("a".to_owned(), "a".to_owned()));
        assert_eq!(learned.new_tokens[0], "aa");
        assert_eq!(learned.new_tokens.len(), 3);
        for (left, right) in &learned.merges {
            assert!(learned.new_tokens.contains(&format!("{left}{right}")));
        }
    }

    #[test]
    fn learning_stops_when_no_pair_repeats() {
        let learned = learn_merges("abcdef", 10);
        assert!(learned.merges.is_empty());
    }
}
