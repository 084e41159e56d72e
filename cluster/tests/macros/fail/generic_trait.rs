#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search<Q> {
    async fn ping(&self);
}

fn main() {}
