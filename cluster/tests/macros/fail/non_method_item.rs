#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search {
    const LIMIT: u32;
    async fn ping(&self);
}

fn main() {}
