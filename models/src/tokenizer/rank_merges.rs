//! Merge rules rebuilt from a vocabulary whose token ids are byte-pair ranks (tiktoken style).
//!
//! Kimi-K2's tokenizer is tiktoken: it ships no merge list, only each token's rank. llama.cpp's
//! converter (`convert_hf_to_gguf.py`) writes every token at its rank as id and derives the merges
//! from the ranks; llama.cpp itself refuses a `gpt2` file without `tokenizer.ggml.merges`. For
//! files written without them, this rebuilds the list that converter writes, so the tokenizer is
//! the one a complete file gives.
//!
//! Each token of two or more symbols, in rank order, is merged the way tiktoken merges a word but
//! with only the tokens of lower rank; when that leaves exactly two parts, joining those two is
//! the token's merge rule.

use std::collections::HashMap;
use std::ops::Range;

use tokenizers::models::bpe::Merges;

/// The merge rules implied by `ranked` (rank and text of every mergeable token, byte-level text).
pub(crate) fn merges_from_ranks<'a>(ranked: impl IntoIterator<Item = (usize, &'a str)>) -> Merges {
    let mut by_rank: Vec<(usize, &str)> = ranked.into_iter().collect();
    by_rank.sort_unstable_by_key(|&(rank, _)| rank);
    let rank_of: HashMap<&str, usize> = by_rank.iter().map(|&(rank, text)| (text, rank)).collect();
    by_rank
        .iter()
        .filter_map(|&(rank, text)| {
            let [left, right] = merge_below(text, rank, &rank_of)?;
            let (left, right) = (&text[left], &text[right]);
            // A part that is no token (a vocabulary missing a byte) cannot be a merge operand; the
            // BPE builder would panic on it.
            (rank_of.contains_key(left) && rank_of.contains_key(right))
                .then(|| (left.to_owned(), right.to_owned()))
        })
        .collect()
}

/// Merges the characters of `text` by lowest rank, using only ranks below `max_rank`, and returns
/// the two parts left, if exactly two are.
fn merge_below(text: &str, max_rank: usize, rank_of: &HashMap<&str, usize>) -> Option<[Range<usize>; 2]> {
    let mut parts: Vec<Range<usize>> = text.char_indices().map(|(at, c)| at..at + c.len_utf8()).collect();
    loop {
        let best = parts
            .windows(2)
            .enumerate()
            .filter_map(|(index, pair)| {
                let rank = *rank_of.get(&text[pair[0].start..pair[1].end])?;
                (rank < max_rank).then_some((rank, index))
            })
            .min();
        let Some((_, index)) = best else { break };
        let right = parts.remove(index + 1);
        parts[index].end = right.end;
    }
    <[Range<usize>; 2]>::try_from(parts).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(merges: &[(&str, &str)]) -> Merges {
        merges.iter().map(|&(l, r)| (l.to_owned(), r.to_owned())).collect()
    }

    #[test]
    fn each_token_merges_its_two_last_parts_in_rank_order() {
        let ranked = [(0, "a"), (1, "b"), (2, "c"), (3, "bc"), (4, "ab"), (5, "abc")];
        // "abc" first joins "bc" (rank 3, below "ab" at 4), so its own rule is "a" + "bc".
        assert_eq!(merges_from_ranks(ranked), pairs(&[("b", "c"), ("a", "b"), ("a", "bc")]));
    }

    #[test]
    fn ties_go_to_the_leftmost_pair_and_single_symbols_have_no_rule() {
        let ranked = [(0, "a"), (1, "aa"), (2, "aaa")];
        assert_eq!(merges_from_ranks(ranked), pairs(&[("a", "a"), ("aa", "a")]));
    }

    #[test]
    fn tokens_that_do_not_reduce_to_two_parts_or_name_missing_symbols_are_skipped() {
        // "xyz" has no lower-ranked pairs, so it stays three parts; "qa" needs "q", which is absent.
        let ranked = [(0, "a"), (1, "x"), (2, "y"), (3, "z"), (4, "xyz"), (5, "qa")];
        assert_eq!(merges_from_ranks(ranked), Merges::new());
    }
}
