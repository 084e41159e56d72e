#[cluster::service(version = "1.0.0")]
pub trait Search {
    async fn ping(&self);
}

fn main() {}
