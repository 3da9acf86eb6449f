//! The `tojson` filter as transformers defines it: Python's `json.dumps` with
//! `ensure_ascii=False` by default, no HTML escaping, insertion key order, and the
//! `indent`, `separators`, `sort_keys` and `ensure_ascii` keyword arguments.

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// The filter registered as `tojson`.
pub(super) fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let options = DumpOptions::from_kwargs(&kwargs)?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    options.write(&mut out, value, 0)?;
    Ok(Value::from(out))
}

/// The subset of `json.dumps` arguments that templates pass.
struct DumpOptions {
    ensure_ascii: bool,
    /// One level of indentation; `None` writes everything on one line.
    indent: Option<String>,
    item_separator: String,
    key_separator: String,
    sort_keys: bool,
}

impl DumpOptions {
    fn from_kwargs(kwargs: &Kwargs) -> Result<Self, Error> {
        let ensure_ascii = kwargs.get::<Option<Value>>("ensure_ascii")?.is_some_and(|value| value.is_true());
        let sort_keys = kwargs.get::<Option<Value>>("sort_keys")?.is_some_and(|value| value.is_true());
        let indent = match kwargs.get::<Option<Value>>("indent")? {
            None => None,
            Some(value) if value.is_none() => None,
            Some(value) => Some(indent_unit(&value)?),
        };
        // Python's default item separator drops the space when indenting, since the
        // newline already separates items.
        let default_item_separator = if indent.is_some() { "," } else { ", " };
        let (item_separator, key_separator) = match kwargs.get::<Option<Value>>("separators")? {
            Some(value) if !value.is_none() => separator_pair(&value)?,
            _ => (default_item_separator.to_owned(), ": ".to_owned()),
        };
        Ok(Self { ensure_ascii, indent, item_separator, key_separator, sort_keys })
    }

    fn write(&self, out: &mut String, value: &Value, depth: usize) -> Result<(), Error> {
        match value.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => write_number(out, value)?,
            ValueKind::String => self.write_string(out, value.as_str().unwrap_or_default()),
            ValueKind::Seq | ValueKind::Iterable => {
                let items = value.try_iter()?.collect::<Vec<_>>();
                self.write_container(out, ('[', ']'), &items, depth, |out, item, depth| {
                    self.write(out, item, depth)
                })?;
            }
            ValueKind::Map => {
                let mut entries = value
                    .try_iter()?
                    .map(|key| {
                        let item = value.get_item(&key)?;
                        Ok((key, item))
                    })
                    .collect::<Result<Vec<_>, Error>>()?;
                if self.sort_keys {
                    entries.sort_by(|(left, _), (right, _)| left.cmp(right));
                }
                self.write_container(out, ('{', '}'), &entries, depth, |out, (key, item), depth| {
                    self.write_string(out, &key_text(key)?);
                    out.push_str(&self.key_separator);
                    self.write(out, item, depth)
                })?;
            }
            kind => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("object of type {kind} is not JSON serializable"),
                ));
            }
        }
        Ok(())
    }

    fn write_container<T>(
        &self,
        out: &mut String,
        (open, close): (char, char),
        items: &[T],
        depth: usize,
        write_item: impl Fn(&mut String, &T, usize) -> Result<(), Error>,
    ) -> Result<(), Error> {
        out.push(open);
        if items.is_empty() {
            out.push(close);
            return Ok(());
        }
        for (index, item) in items.iter().enumerate() {
            if index > 0 {
                out.push_str(&self.item_separator);
            }
            self.newline(out, depth + 1);
            write_item(out, item, depth + 1)?;
        }
        self.newline(out, depth);
        out.push(close);
        Ok(())
    }

    fn newline(&self, out: &mut String, depth: usize) {
        if let Some(unit) = &self.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(unit);
            }
        }
    }

    fn write_string(&self, out: &mut String, text: &str) {
        out.push('"');
        for ch in text.chars() {
            match ch {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{08}' => out.push_str("\\b"),
                '\u{0c}' => out.push_str("\\f"),
                ch if ch < ' ' || (self.ensure_ascii && !ch.is_ascii()) => {
                    let mut units = [0u16; 2];
                    for unit in ch.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                ch => out.push(ch),
            }
        }
        out.push('"');
    }
}

/// `indent=N` indents by N spaces (none for N <= 0, but still one item per line);
/// `indent="\t"` indents by that string.
fn indent_unit(value: &Value) -> Result<String, Error> {
    if let Some(text) = value.as_str() {
        return Ok(text.to_owned());
    }
    match value.as_i64() {
        Some(width) if value.is_integer() => Ok(" ".repeat(usize::try_from(width).unwrap_or(0))),
        _ => Err(Error::new(ErrorKind::InvalidOperation, "tojson: indent must be an integer or a string")),
    }
}

fn separator_pair(value: &Value) -> Result<(String, String), Error> {
    let parts = value.try_iter()?.collect::<Vec<_>>();
    match parts.as_slice() {
        [item, key] if item.as_str().is_some() && key.as_str().is_some() => {
            Ok((item.as_str().unwrap_or_default().to_owned(), key.as_str().unwrap_or_default().to_owned()))
        }
        _ => Err(Error::new(ErrorKind::InvalidOperation, "tojson: separators must be a pair of strings")),
    }
}

/// Python's `json.dumps` turns scalar keys into strings and rejects the rest.
fn key_text(key: &Value) -> Result<String, Error> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or_default().to_owned()),
        ValueKind::None => Ok("null".to_owned()),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.to_owned()),
        ValueKind::Number => {
            let mut text = String::new();
            write_number(&mut text, key)?;
            Ok(text)
        }
        kind => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("keys must be str, int, float, bool or None, not {kind}"),
        )),
    }
}

fn write_number(out: &mut String, value: &Value) -> Result<(), Error> {
    if value.is_integer() {
        out.push_str(&value.to_string());
        return Ok(());
    }
    let float = f64::try_from(value.clone())?;
    out.push_str(&python_float_repr(float));
    Ok(())
}

/// Python's `repr(float)` as `json.dumps` writes it: the shortest digits that round-trip,
/// in positional notation for exponents from -4 to 15 and scientific notation otherwise.
fn python_float_repr(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value < 0.0 { "-Infinity" } else { "Infinity" }.to_owned();
    }
    // `{:e}` gives the shortest round-trip digits as `[-]d[.ddd]e[-]x`.
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if !(-4..16).contains(&exponent) {
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        return format!("{sign}{mantissa}e{exponent_sign}{:02}", exponent.abs());
    }
    let point = exponent + 1;
    if point <= 0 {
        let zeros = "0".repeat(point.unsigned_abs() as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let point = point as usize;
    if digits.len() <= point {
        let zeros = "0".repeat(point - digits.len());
        format!("{sign}{digits}{zeros}.0")
    } else {
        format!("{sign}{}.{}", &digits[..point], &digits[point..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_written_like_python_repr() {
        let cases = [
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (0.1, "0.1"),
            (123.456, "123.456"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5e-7, "-2.5e-07"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (value, expected) in cases {
            assert_eq!(python_float_repr(value), expected, "{value:e}");
        }
    }
}
