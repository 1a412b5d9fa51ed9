//! A session's metadata (title, tags, fields): `session/meta` events.

use crate::error::{Error, Result};
use crate::session::codec::event::{self};
use crate::session::handle::Session;

impl Session {
    /// The session's metadata (title, tags, fields): the fold of its
    /// `session/meta` events, a fork child's starting from its parent's at
    /// the fork point. Like every view it is in the log, so it survives a
    /// crash once durable.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use turnstone::session::*;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Arc::new(turnstone::Store::open(dir.path()).unwrap());
    /// let mut s = Session::create(store, "s1", Arc::new(Registry::new())).unwrap();
    /// s.set_title("fix the flaky test").unwrap();
    /// s.add_tag("ci").unwrap();
    /// s.set_meta("git_branch", "main").unwrap();
    /// assert_eq!(s.metadata().title.as_deref(), Some("fix the flaky test"));
    /// assert!(s.metadata().tags.contains("ci"));
    /// assert_eq!(s.metadata().fields["git_branch"], "main");
    /// ```
    pub fn metadata(&self) -> &event::SessionMetadata {
        &self.state.metadata
    }

    /// Append one `session/meta` event (checked against the limits of
    /// [`event::MetaUpdate::check`]). Returns its seq.
    pub fn update_metadata(&mut self, update: event::MetaUpdate) -> Result<u64> {
        update.check().map_err(Error::InvalidArgument)?;
        self.append(update, ())
    }

    /// Set the title (`""` clears it).
    pub fn set_title(&mut self, title: &str) -> Result<u64> {
        self.update_metadata(event::MetaUpdate {
            title: Some(title.to_string()),
            ..Default::default()
        })
    }

    /// Add a tag.
    pub fn add_tag(&mut self, tag: &str) -> Result<u64> {
        self.update_metadata(event::MetaUpdate {
            add_tags: vec![tag.to_string()],
            ..Default::default()
        })
    }

    /// Remove a tag.
    pub fn remove_tag(&mut self, tag: &str) -> Result<u64> {
        self.update_metadata(event::MetaUpdate {
            remove_tags: vec![tag.to_string()],
            ..Default::default()
        })
    }

    /// Set a free key/value field (user id, cwd, git branch, model, ...).
    pub fn set_meta(&mut self, key: &str, value: &str) -> Result<u64> {
        self.update_metadata(event::MetaUpdate {
            fields: [(key.to_string(), Some(value.to_string()))].into(),
            ..Default::default()
        })
    }

    /// Remove a free key/value field.
    pub fn remove_meta(&mut self, key: &str) -> Result<u64> {
        self.update_metadata(event::MetaUpdate {
            fields: [(key.to_string(), None)].into(),
            ..Default::default()
        })
    }
}
