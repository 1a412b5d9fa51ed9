//! `Job`: work run on libuv's thread pool whose result resolves a
//! Promise, a panic in it becoming a rejection.

use napi::bindgen_prelude::*;
use napi::{Env, Task};

use crate::convert::{thrown, usage};

/// Work run on libuv's thread pool; its result resolves the Promise.
pub struct Job<T: Send + 'static>(Option<Box<dyn FnOnce() -> napi::Result<T> + Send>>);

impl<T: Send + ToNapiValue + TypeName + 'static> Job<T> {
    pub(crate) fn new(f: impl FnOnce() -> napi::Result<T> + Send + 'static) -> AsyncTask<Job<T>> {
        AsyncTask::new(Job(Some(Box::new(f))))
    }
}

impl<T: Send + ToNapiValue + TypeName + 'static> Task for Job<T> {
    type Output = T;
    type JsValue = T;

    fn compute(&mut self) -> napi::Result<T> {
        let f = self
            .0
            .take()
            .ok_or_else(|| usage("a task of the turnstone addon ran twice"))?;
        // A panic becomes a rejected Promise, never an abort of the process.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(thrown(
                "panic",
                format!("internal error (a bug): {what}"),
                None,
                None,
            ))
        })
    }

    fn resolve(&mut self, _env: Env, output: T) -> napi::Result<T> {
        Ok(output)
    }
}
