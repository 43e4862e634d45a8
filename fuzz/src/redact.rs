//! Target `redact`: `redact_url` over arbitrary text and over `redis://user:PASSWORD@HOST`
//! (PASSWORD = the first line of the input, HOST = the second, default `127.0.0.1:6379`).
//! Properties: never panics; the output never contains the password (nor any '@'-separated
//! piece of it), whether or not the URL parses.

use ironlock::redact_url;
use percent_encoding::percent_decode_str;

use crate::known;
use crate::secrets::{assert_hidden, mask, secrets};

/// The properties, for one input.
pub fn check(data: &[u8]) {
    let input = String::from_utf8_lossy(data);
    for line in input.split('\n') {
        any_text(line);
    }
    let mut parts = input.splitn(2, '\n');
    let password = parts.next().unwrap_or_default();
    let host: String = parts
        .next()
        .unwrap_or("127.0.0.1:6379")
        .chars()
        .filter(|c| !matches!(c, '@' | '/' | '?' | '#' | '\n'))
        .collect();
    template(password, &host);
}

/// Any text: every password `secrets` finds in it stays hidden.
fn any_text(line: &str) {
    let shown = redact_url(line);
    for secret in secrets(line) {
        if line.matches(secret.raw.as_str()).count() != 1 {
            continue;
        }
        let benign = redact_url(&mask(line, &secret.raw));
        for form in &secret.forms {
            assert_hidden(form, &shown, &benign, "redact_url");
        }
    }
}

/// `redis://user:PASSWORD@HOST`, whatever PASSWORD holds: a '/', '?' or '#' in it ends the
/// URL's authority for the parser, yet a reader (and the user who pasted a generated password)
/// takes it for a password, so it must stay hidden too.
fn template(password: &str, host: &str) {
    if password.is_empty() {
        return;
    }
    let url = format!("redis://user:{password}@{host}");
    let shown = redact_url(&url);
    // What the output holds anyway: the rest of the URL, with and without a masked password.
    let benign = format!(
        "{}\n{}",
        redact_url(&format!("redis://user:@{host}")),
        redact_url(&format!("redis://user:***@{host}"))
    );
    if password.contains('@')
        && known::relaxed(known::REDACT_TEXT)
        && url::Url::parse(&url).is_err()
    {
        return; // core's fallback shows what follows the first '@' (known.rs)
    }
    let decoded = percent_decode_str(password).decode_utf8_lossy();
    let mut forms: Vec<&str> = vec![password, &decoded];
    forms.extend(password.split('@').filter(|p| !p.is_empty()));
    for form in forms {
        assert_hidden(
            form,
            &shown,
            &benign,
            "redact_url(redis://user:PASSWORD@HOST)",
        );
    }
}
