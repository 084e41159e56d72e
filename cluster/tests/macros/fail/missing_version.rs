#[cluster::service(name = "search")]
pub trait Search {
    async fn ping(&self);
}

fn main() {}
