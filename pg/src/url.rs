//! Telling a PostgreSQL connection URL from a path, and showing one
//! without its password: shared by the CLI and the Python and Node packages.

/// Whether `s` is a PostgreSQL connection URL rather than a path.
pub fn is_url(s: &str) -> bool {
    let lower = s.get(..13).unwrap_or(s).to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match auth.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths_are_told_apart() {
        assert!(is_url("postgres://u@h/db"));
        assert!(is_url("PostgreSQL://u@h/db"));
        assert!(!is_url("./postgres://x"));
        assert!(!is_url("/tmp/store"));
        assert!(!is_url("postgres"));
    }

    #[test]
    fn a_password_is_not_shown() {
        assert_eq!(
            redact("postgres://me:s3cret@db.example:5432/app?sslmode=disable"),
            "postgres://me:***@db.example:5432/app?sslmode=disable"
        );
        assert_eq!(redact("postgres://me@h/db"), "postgres://me@h/db");
        assert_eq!(redact("postgresql://h/db"), "postgresql://h/db");
        assert!(!redact("postgres://a:p@ss@h/db").contains("p@ss"));
    }
}
