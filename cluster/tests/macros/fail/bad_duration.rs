#[cluster::service(name = "search", version = "1.0.0", timeout = "5 sec")]
pub trait Search {
    async fn ping(&self);
}

fn main() {}
