pub struct Query;

#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search {
    async fn search(&self, query: Query) -> Option<Self>
    where
        Self: Sized;
}

fn main() {}
