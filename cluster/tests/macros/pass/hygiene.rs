// Generated code must name nothing through the prelude: this module has none, and user types
// called `Result` and `Option` are in scope.
#![deny(warnings)]
mod service {
    #![no_implicit_prelude]

    #[derive(::serde::Serialize, ::serde::Deserialize)]
    pub struct Result {
        pub value: u32,
    }

    #[derive(::serde::Serialize, ::serde::Deserialize)]
    pub struct Option;

    #[::cluster::service(
        name = "hygiene",
        version = "1.0.0",
        timeout = "1s",
        retry(after = "1ms")
    )]
    pub trait Hygiene {
        #[call(idempotent)]
        async fn get(&self, key: ::std::string::String) -> Result;
        async fn check(&self, item: Option) -> ::core::result::Result<u32, ::std::string::String>;
        async fn inner(&self, inner: u32, args: u32, function: u32) -> u32;
        async fn none(&self);
    }

    pub struct Provider;

    impl Hygiene for Provider {
        async fn get(&self, _key: ::std::string::String) -> Result {
            Result { value: 1 }
        }

        async fn check(&self, _item: Option) -> ::core::result::Result<u32, ::std::string::String> {
            ::core::result::Result::Ok(2)
        }

        async fn inner(&self, inner: u32, args: u32, function: u32) -> u32 {
            inner + args + function
        }

        async fn none(&self) {}
    }

    pub fn build(node: &::cluster::__private::Node) {
        let client = HygieneClient::new(node);
        let _call = client.get(::std::string::String::new());
        let _call = client.inner(1, 2, 3);
        let _server = HygieneServer::new(Provider);
    }
}

/// A user type named `T` must not be captured by the server's type parameter.
mod shadowing {
    #[derive(serde::Serialize, serde::Deserialize)]
    pub struct T(pub u8);

    #[cluster::service(name = "shadowing", version = "1.0.0")]
    pub trait Shadowing {
        async fn echo(&self, value: T) -> T;
    }

    pub struct Provider;

    impl Shadowing for Provider {
        async fn echo(&self, value: T) -> T {
            value
        }
    }
}

fn main() {
    let _ = service::build;
    let _server = shadowing::ShadowingServer::new(shadowing::Provider);
}
