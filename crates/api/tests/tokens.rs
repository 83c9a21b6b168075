//! Token management: list, revoke and rotate API tokens and wire access
//! keys, and tokens that expire. A revocation or an expiry takes effect at
//! the next request.

mod common;

use std::time::Duration;

use common::{call, env};
use serde_json::Value;

async fn list(env: &common::Env) -> Vec<Value> {
    let a = call(env, "GET", "/v1/tokens", Some(&env.admin), &[], "").await;
    assert_eq!(a.status, 200, "{}", a.text);
    a.json()["tokens"].as_array().unwrap().clone()
}

/// POST /v1/tokens with the admin token; the answer, which must be 201.
async fn create(env: &common::Env, body: &str) -> Value {
    let a = call(env, "POST", "/v1/tokens", Some(&env.admin), &[], body).await;
    assert_eq!(a.status, 201, "{body}: {}", a.text);
    a.json()
}

async fn health_with(env: &common::Env, token: &str) -> common::Answer {
    call(env, "GET", "/v1/events", Some(token), &[], "").await
}

#[tokio::test]
async fn a_revoked_token_is_refused_at_its_next_request() {
    let env = env().await;
    let a = create(&env, r#"{"tenant": "acme", "subject": "ci"}"#).await;
    let (token, id) = (
        a["token"].as_str().unwrap().to_owned(),
        a["id"].as_str().unwrap().to_owned(),
    );
    assert_eq!(health_with(&env, &token).await.status, 200);

    let listed = list(&env).await;
    let row = listed
        .iter()
        .find(|t| t["id"] == id.as_str())
        .expect("listed");
    assert_eq!(
        (
            row["tenant"].as_str(),
            row["subject"].as_str(),
            row["kind"].as_str()
        ),
        (Some("acme"), Some("ci"), Some("token"))
    );
    assert!(
        !listed.iter().any(|t| t.to_string().contains("pbx_")),
        "a listing shows no token"
    );

    // Only an admin may list or revoke.
    assert_eq!(
        call(&env, "GET", "/v1/tokens", Some(&env.acme), &[], "")
            .await
            .status,
        403
    );
    assert_eq!(
        call(
            &env,
            "DELETE",
            &format!("/v1/tokens/{id}"),
            Some(&env.acme),
            &[],
            ""
        )
        .await
        .status,
        403
    );

    let a = call(
        &env,
        "DELETE",
        &format!("/v1/tokens/{id}"),
        Some(&env.admin),
        &[],
        "",
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let refused = health_with(&env, &token).await;
    assert_eq!(refused.status, 401, "{}", refused.text);
    assert!(!list(&env).await.iter().any(|t| t["id"] == id.as_str()));
    // Again: nothing to revoke.
    assert_eq!(
        call(
            &env,
            "DELETE",
            &format!("/v1/tokens/{id}"),
            Some(&env.admin),
            &[],
            ""
        )
        .await
        .status,
        404
    );
    // Other tokens are untouched.
    assert_eq!(health_with(&env, &env.acme).await.status, 200);
}

#[tokio::test]
async fn a_rotated_token_replaces_the_old_one() {
    let env = env().await;
    let a = create(&env, r#"{"tenant": "acme", "subject": "billing"}"#).await;
    let (old, id) = (
        a["token"].as_str().unwrap().to_owned(),
        a["id"].as_str().unwrap().to_owned(),
    );
    let a = call(
        &env,
        "POST",
        &format!("/v1/tokens/{id}/rotate"),
        Some(&env.admin),
        &[],
        "",
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.text);
    let new = a.json()["token"].as_str().unwrap().to_owned();
    assert_eq!(a.json()["replaces"], id.as_str());
    assert_eq!(a.json()["subject"], "billing");
    assert_eq!(health_with(&env, &old).await.status, 401);
    assert_eq!(health_with(&env, &new).await.status, 200);
    assert_eq!(
        call(
            &env,
            "POST",
            "/v1/tokens/0000000000000000/rotate",
            Some(&env.admin),
            &[],
            ""
        )
        .await
        .status,
        404
    );
}

#[tokio::test]
async fn a_token_with_an_expiry_is_refused_after_it() {
    let env = env().await;
    for bad in [
        r#"{"tenant": "acme", "expires_in": 0}"#,
        r#"{"tenant": "acme", "expires_in": 999999999999}"#,
    ] {
        let a = call(&env, "POST", "/v1/tokens", Some(&env.admin), &[], bad).await;
        assert_eq!(a.status, 400, "{bad}: {}", a.text);
    }
    let a = create(&env, r#"{"tenant": "acme", "expires_in": 1}"#).await;
    assert!(a["expires_at"].is_string(), "{a}");
    let token = a["token"].as_str().unwrap().to_owned();
    assert_eq!(health_with(&env, &token).await.status, 200);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let refused = health_with(&env, &token).await;
    assert_eq!(refused.status, 401, "{}", refused.text);
    assert!(refused.text.contains("expired"), "{}", refused.text);
}

#[tokio::test]
async fn access_keys_are_listed_without_secrets_and_revoked() {
    let env = env().await;
    let a = create(&env, r#"{"aws": true, "admin": true}"#).await;
    let id = a["access_key_id"].as_str().unwrap().to_owned();
    let secret = a["secret_access_key"].as_str().unwrap().to_owned();
    let listed = list(&env).await;
    assert!(
        listed
            .iter()
            .any(|t| t["id"] == id.as_str() && t["kind"] == "access_key")
    );
    assert!(!listed.iter().any(|t| t.to_string().contains(&secret)));
    let a = call(
        &env,
        "DELETE",
        &format!("/v1/tokens/{id}"),
        Some(&env.admin),
        &[],
        "",
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert!(
        !postbox_server::auth::access_key_exists(&env.store, &id)
            .await
            .unwrap()
    );
}
