//! Metadata-only answers, as kube-apiserver gives them to a client that asks for
//! `Accept: application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`
//! (kube-rs `Api::get_metadata` / `list_metadata`, client-go's metadata informers):
//! each object reduced to its `metadata`, kind `PartialObjectMetadata`, group
//! `meta.k8s.io/v1`. A controller that only needs names, labels and resource versions
//! asks for this to avoid reading whole objects.

use axum::http::{HeaderMap, header};
use serde_json::{Value, json};

/// The group version of the metadata-only kinds.
pub(super) const API_VERSION: &str = "meta.k8s.io/v1";

/// Whether `headers` ask for `kind` (`PartialObjectMetadata` or
/// `PartialObjectMetadataList`) as JSON: one media range of the `Accept` header names
/// it with `g=meta.k8s.io` and `v=v1`.
pub(super) fn asked(headers: &HeaderMap, kind: &str) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
            let has = |k: &str, v: &str| params.iter().any(|(pk, pv)| *pk == k && *pv == v);
            media == "application/json"
                && has("as", kind)
                && has("g", "meta.k8s.io")
                && has("v", "v1")
        })
}

/// `obj` as a `PartialObjectMetadata`.
pub(super) fn object(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": API_VERSION,
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn accept(v: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_static(v));
        h
    }

    #[test]
    fn reads_the_kind_from_one_media_range() {
        let h = accept("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1");
        assert!(asked(&h, "PartialObjectMetadataList"));
        assert!(!asked(&h, "PartialObjectMetadata"));
        let h = accept(
            "application/json; as=PartialObjectMetadata; g=meta.k8s.io; v=v1, application/json",
        );
        assert!(asked(&h, "PartialObjectMetadata"));
    }

    #[test]
    fn plain_json_and_other_groups_are_not_metadata_only() {
        assert!(!asked(
            &accept("application/json"),
            "PartialObjectMetadataList"
        ));
        let h = accept("application/json;as=PartialObjectMetadataList;g=other.io;v=v1");
        assert!(!asked(&h, "PartialObjectMetadataList"));
        assert!(!asked(&HeaderMap::new(), "PartialObjectMetadataList"));
    }

    #[test]
    fn keeps_only_the_metadata() {
        let obj = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "a"}, "spec": {}});
        assert_eq!(
            object(&obj),
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {"name": "a"}})
        );
    }
}
