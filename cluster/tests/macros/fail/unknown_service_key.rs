#[cluster::service(name = "search", version = "1.0.0", timout = "5s")]
pub trait Search {
    async fn ping(&self);
}

fn main() {}
