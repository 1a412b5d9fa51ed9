// A surface event cannot be appended without a surface op.
use std::sync::Arc;
use turnstone::session::*;

fn main() {
    let dir = std::path::Path::new("/nonexistent");
    let store = Arc::new(turnstone::Store::open(dir).unwrap());
    let mut s = Session::create(store, "s", Arc::new(Registry::new())).unwrap();
    s.append(UserMessage { content: vec![] }, ()).unwrap();
}
