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
/// client certificate for mutual TLS (`client.pem`, `client.key`) and an unrelated second CA
/// (`other-ca.pem`). Valid for two days; for tests only.
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
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
    make_client_cert(dir);
}

/// A client certificate signed by the test CA (for mutual TLS).
fn make_client_cert(dir: &Path) {
    // Extensions make it an X.509 v3 certificate (webpki refuses v1).
    std::fs::write(
        dir.join("client.cnf"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "client.key",
            "-out",
            "client.csr",
            "-subj",
            "/CN=ironlock client",
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "client.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "client.pem",
            "-days",
            "2",
            "-extfile",
            "client.cnf",
        ],
    );
}
