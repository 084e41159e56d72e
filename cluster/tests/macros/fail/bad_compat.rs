#[cluster::service(name = "search", version = "2.1.0", compat = "2.1.0.7")]
pub trait Search {
    async fn ping(&self);
}

fn main() {}
