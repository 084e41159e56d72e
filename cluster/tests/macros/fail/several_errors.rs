// Every mistake in one trait is reported in one build, each at its own token.
#[cluster::service(name = "search", version = "two", timout = "5s", retry(after = "soon"))]
pub trait Search {
    #[call(idempotent, timeout = "1d")]
    fn search(&self, query: String) -> u32;
    async fn reindex(full: bool);
    async fn search(&self);
    type Hit;
}

fn main() {}
