#[cluster::service(name = "search", version = "2.1")]
pub trait Search {
    async fn ping(&self);
}

fn main() {}
