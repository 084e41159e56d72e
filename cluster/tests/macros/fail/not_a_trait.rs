#[cluster::service(name = "search", version = "1.0.0")]
pub struct Search;

fn main() {}
