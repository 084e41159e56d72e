#[cluster::service(name = "bank", version = "1.0.0")]
pub trait Bank {
    #[call(hedge(after = "20ms", max = 1))]
    async fn deposit(&self, cents: u64) -> u64;
}

fn main() {}
