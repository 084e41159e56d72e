#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search {
    async fn new(&self);
}

fn main() {}
