//! A throw-away PKI for TLS tests (core and CLI), made with the `openssl` command.

use std::path::Path;
use std::process::Command;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl is installed");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes a throw-away PKI into `dir` with the `openssl` command: a CA (`ca.pem`, `ca.key`), a
/// server certificate for 127.0.0.1 and localhost signed by it (`server.pem`, `server.key`), a
/// client certificate for mutual TLS (`client.pem`, `client.key`), a server certificate that
/// names only `redis-a.ironlock.test` (`named.pem`, `named.key`: a client must verify that name
/// while connecting to 127.0.0.1), an unrelated second CA (`other-ca.pem`) and a server
/// certificate for 127.0.0.1 signed by it (`other-server.pem`, `other-server.key`). Valid for two
/// days; for tests only.
pub fn make_test_pki(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for ca in ["ca", "other-ca"] {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.pem"),
                "-days",
                "2",
                "-subj",
                &format!("/CN=ironlock {ca}"),
            ],
        );
    }
    signed(
        dir,
        "server",
        "/CN=127.0.0.1",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    );
    signed(
        dir,
        "named",
        "/CN=redis-a.ironlock.test",
        "subjectAltName=DNS:redis-a.ironlock.test\n",
    );
    signed_by(
        dir,
        "other-ca",
        "other-server",
        "/CN=127.0.0.1",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    );
    // Extensions make it an X.509 v3 certificate (webpki refuses v1).
    signed(
        dir,
        "client",
        "/CN=ironlock client",
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
    );
}

/// `NAME.key` and `NAME.pem`: a key and a certificate for `subject` with the extensions `ext`,
/// signed by the test CA.
fn signed(dir: &Path, name: &str, subject: &str, ext: &str) {
    signed_by(dir, "ca", name, subject, ext);
}

/// As [`signed`], by the CA `ca` (`ca.pem`, `ca.key` in `dir`).
fn signed_by(dir: &Path, ca: &str, name: &str, subject: &str, ext: &str) {
    let (ca_pem, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
    let (key, csr, pem, cnf) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.cnf"),
    );
    std::fs::write(dir.join(&cnf), ext).unwrap();
    openssl(
        dir,
        &[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", subject,
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_pem,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &cnf,
        ],
    );
}
