//! What counts as a password in a node URL, and the check that it is never shown.

use percent_encoding::percent_decode_str;

use crate::known;

/// Passwords shorter than this are not checked: they turn up in ordinary text ("6379").
const MIN_LEN: usize = 6;

/// One password found in a URL: `raw` as written in the URL (what [`mask`] replaces) and every
/// form in which it must not be shown (as written, percent-decoded, as the URL parser holds it).
#[derive(Debug)]
pub(crate) struct Secret {
    pub(crate) raw: String,
    pub(crate) forms: Vec<String>,
}

/// Every text of `url` a reader would take for a password:
/// - the userinfo password: between the first ':' and the LAST '@' of the authority (for a URL
///   that does not parse, of everything after `scheme://`), since a userinfo ends at its last
///   '@'; each '@'-separated piece of it counts on its own, so a partly shown password fails;
/// - the value of a `pass` / `password` query parameter (the names `redact_url` and the redis
///   crate read).
pub(crate) fn secrets(url: &str) -> Vec<Secret> {
    let mut out = Vec::new();
    let Some((_, rest)) = url.split_once("://") else {
        return out;
    };
    let parsed = url::Url::parse(url).ok();
    // While core is known to hide only what the URL parser calls a password (known.rs), only
    // the parser's password and query of a URL that parses are checked.
    let relaxed = known::relaxed(known::REDACT_TEXT);
    if relaxed && parsed.as_ref().is_none_or(|u| u.password().is_none()) {
        return query_secrets(url, parsed.is_some(), out);
    }
    let authority = match parsed {
        Some(_) => &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())],
        None => rest,
    };
    let parser_password = parsed.as_ref().and_then(|u| u.password());
    if let Some((_, password)) = authority
        .rsplit_once('@')
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        // While relaxed, only the text the parser took its password from (a later `://` in a
        // path or a special scheme without slashes puts the parser's authority elsewhere).
        && !(relaxed && parser_password.map(decode) != Some(decode(password)))
    {
        let mut forms = vec![password.to_owned(), decode(password)];
        if let Some(p) = parser_password {
            forms.extend([p.to_owned(), decode(p)]);
        }
        push(&mut out, password, forms);
        if password.contains('@') && !relaxed {
            for piece in password.split('@') {
                push(&mut out, piece, vec![piece.to_owned(), decode(piece)]);
            }
        }
    }
    // The parser's password where the text before it does not look like `scheme://user:`
    // (`https:/h:pw@x`, special schemes take one slash or none).
    // (Compared with the raw text too: a short password's own forms are dropped by MIN_LEN, and
    // its encoded form may then stand in the host by coincidence, `u:e@@@@e%40%40%40`.)
    if let Some(p) = parser_password
        && !out
            .iter()
            .any(|s| s.forms.contains(&decode(p)) || decode(&s.raw) == decode(p))
        && url.matches(p).count() == 1
    {
        push(&mut out, p, vec![p.to_owned(), decode(p)]);
    }
    query_secrets(url, parsed.is_some() || !relaxed, out)
}

/// Adds the `pass` / `password` query values of `url` (when `check` is true) and returns all.
fn query_secrets(url: &str, check: bool, mut out: Vec<Secret>) -> Vec<Secret> {
    // A query ends at the fragment; a '?' inside the fragment starts no query.
    let before_fragment = url.split('#').next().unwrap_or_default();
    let Some((_, query)) = before_fragment.split_once('?').filter(|_| check) else {
        return out;
    };
    for pair in query.split('&') {
        let Some((name, value)) = url::form_urlencoded::parse(pair.as_bytes()).next() else {
            continue;
        };
        if matches!(name.as_ref(), "pass" | "password") {
            let raw = pair.split_once('=').map_or("", |(_, v)| v);
            push(&mut out, raw, vec![raw.to_owned(), value.into_owned()]);
        }
    }
    out
}

fn push(out: &mut Vec<Secret>, raw: &str, mut forms: Vec<String>) {
    forms.retain(|f| f.chars().count() >= MIN_LEN);
    forms.sort();
    forms.dedup();
    if !raw.is_empty() && !forms.is_empty() {
        out.push(Secret {
            raw: raw.to_owned(),
            forms,
        });
    }
}

fn decode(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// `text` with every occurrence of `secret` replaced by as many filler characters (one that does
/// not occur in the secret): the same input, minus the password.
pub(crate) fn mask(text: &str, secret: &str) -> String {
    let filler = ['Q', 'Z', 'x', 'k']
        .into_iter()
        .find(|c| !secret.contains(*c))
        .unwrap_or('Q');
    text.replace(secret, &filler.to_string().repeat(secret.chars().count()))
}

/// Fails when `shown` contains `form` (a form of a password) although the same output made
/// from the input without that password (`benign`) does not: then the password is what put it
/// there, rather than the message's own words or the host name.
///
/// The mask `***` itself, with the URL's own text around it, can spell a password
/// (`red://***@h` "shows" the passwords `ed://***` and `ed://**`): an occurrence that goes away
/// once the mask is replaced by a character the password does not contain is the mask, not a
/// leak (an occurrence that remains lies wholly outside the mask).
pub fn assert_hidden(form: &str, shown: &str, benign: &str, what: &str) {
    let filler = ('\u{1}'..=char::MAX)
        .find(|c| !form.contains(*c))
        .unwrap_or('\u{1}');
    let without_mask = shown.replace("***", &filler.to_string().repeat(3));
    assert!(
        !without_mask.contains(form) || benign.contains(form),
        "{what} shows the password {form:?}: {shown:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forms(url: &str) -> Vec<String> {
        secrets(url).into_iter().flat_map(|s| s.forms).collect()
    }

    #[test]
    fn finds_userinfo_and_query_passwords() {
        assert_eq!(forms("redis://alice:s3cret-pw@h:1/0"), vec!["s3cret-pw"]);
        assert!(forms("unix:///tmp/r.sock?db=1&pass=s3cret-pw").contains(&"s3cret-pw".into()));
        let f = crate::known::strict(|| forms("redis://u:abcdef@ghijkl@[::"));
        assert!(
            f.contains(&"abcdef@ghijkl".into()) && f.contains(&"ghijkl".into()),
            "{f:?}"
        );
        assert!(forms("redis://127.0.0.1:6379/1").is_empty());
        assert_eq!(mask("a:secret@h", "secret"), "a:QQQQQQ@h");
    }

    #[test]
    fn the_mask_spelling_a_password_is_not_a_leak() {
        // `red://user:ed://**@h` redacts to `red://***@h`, whose `ed://**` is scheme + mask.
        assert_hidden("ed://**", "red://***@h", "red://***@h", "redact");
        assert_hidden("ed://***", "red://***@h", "red://***@h", "redact");
    }

    #[test]
    #[should_panic(expected = "shows the password")]
    fn a_password_next_to_the_mask_is_still_a_leak() {
        assert_hidden("ab**", "red://***@h ab**", "red://***@h", "redact");
    }
}
