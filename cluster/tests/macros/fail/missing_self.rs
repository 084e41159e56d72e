#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search {
    async fn ping(limit: u32);
}

fn main() {}
