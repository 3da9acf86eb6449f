//! A MiniJinja environment that behaves like the Jinja2 environment transformers renders
//! chat templates with.

use std::fmt::Write as _;

use chrono::Local;
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Value, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, UndefinedBehavior};

use super::error::RaisedException;
use super::tojson::tojson;

/// Builds the environment: transformers' `ImmutableSandboxedEnvironment(trim_blocks=True,
/// lstrip_blocks=True)` with its `raise_exception`, `strftime_now` and `tojson` additions,
/// plus Python string and dict methods and Python's meaning of the `sequence` and
/// `iterable` tests.
pub(super) fn hf_environment() -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    env.set_syntax(
        SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).keep_trailing_newline(false).build()?,
    );
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_filter("tojson", tojson);
    env.add_test("sequence", is_python_sequence);
    env.add_test("iterable", is_python_iterable);
    Ok(env)
}

fn raise_exception(message: Value) -> Result<Value, Error> {
    let message = message.to_string();
    Err(Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(RaisedException(message)))
}

/// `datetime.now().strftime(format)`, in local time like Python.
fn strftime_now(format: &str) -> Result<String, Error> {
    let mut out = String::new();
    write!(out, "{}", Local::now().format(format)).map_err(|_| {
        Error::new(ErrorKind::InvalidOperation, format!("strftime_now: invalid format {format:?}"))
    })?;
    Ok(out)
}

/// Jinja2 calls anything with a length and item access a sequence: strings and dicts
/// included (templates rely on it, e.g. `x is sequence and x is not string`).
fn is_python_sequence(value: &Value) -> bool {
    matches!(value.kind(), ValueKind::Undefined | ValueKind::String | ValueKind::Seq | ValueKind::Map)
}

/// Jinja2's `iterable` is false for `None`, which MiniJinja iterates as empty.
fn is_python_iterable(value: &Value) -> bool {
    !value.is_none() && value.try_iter().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str) -> String {
        let env = hf_environment().unwrap();
        env.render_str(source, minijinja::context! {}).unwrap()
    }

    #[test]
    fn tests_follow_python_semantics() {
        assert_eq!(
            render("{{ 'a' is sequence }} {{ {'k': 1} is sequence }} {{ 3 is sequence }}"),
            "True True False"
        );
        assert_eq!(
            render("{{ none is iterable }} {{ 'a' is iterable }} {{ [] is iterable }}"),
            "False True True"
        );
    }

    #[test]
    fn python_methods_are_available() {
        assert_eq!(
            render("{{ ' x\n'.strip() }}|{{ 'a,b'.split(',')[-1] }}|{{ {'k': 1}.items()|list }}"),
            "x|b|[('k', 1)]"
        );
    }

    #[test]
    fn whitespace_is_controlled_like_transformers() {
        assert_eq!(render("  {% if true %}\nyes\n  {% endif %}\nend\n"), "yes\nend");
    }
}
