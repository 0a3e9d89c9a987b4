//! Images from archives and from a registry (a real one, `docker-registry`, on loopback).

use orchard_tests::images::{TestImage, busybox_layer, start_registry, tar_dir};
use orchard_tests::{Server, ServerOptions};
use serde_json::json;

fn image() -> TestImage {
    TestImage::new(vec![busybox_layer(&[("app/hello.txt", b"hello from the image\n")])], &["WHO=archive"], "/app")
}

async fn check(server: &Server, image_ref: &str) {
    let id = server.create(json!({"image": image_ref})).await;
    let r = server.sh(&id, "cat hello.txt; echo $WHO; pwd").await;
    assert_eq!(r.stdout.text, "hello from the image\narchive\n/app\n", "{r:?}");
}

#[tokio::test]
async fn oci_archives_and_docker_save_tars_are_images() {
    let tmp = tempfile::tempdir().unwrap();
    let layout = tmp.path().join("layout");
    image().write_layout(&layout, "latest");
    let oci_archive = tmp.path().join("image.oci.tar");
    std::fs::write(&oci_archive, tar_dir(&layout)).unwrap();
    let docker_archive = tmp.path().join("image.docker.tar");
    image().write_docker_save(&docker_archive);

    let server = Server::with_image_root(tmp.path()).await;
    check(&server, &format!("oci-archive:{}", oci_archive.display())).await;
    check(&server, &docker_archive.display().to_string()).await;
    // Both name the same layers: unpacked per manifest, the archive memo makes a second use free.
    check(&server, &format!("docker-archive:{}", docker_archive.display())).await;
    // A tar that is no image says so.
    let junk = tmp.path().join("junk.tar");
    std::fs::write(&junk, tar_dir(tmp.path().join("layout/blobs").as_path())).unwrap();
    let (status, v) =
        server.call(reqwest::Method::POST, "/sandboxes", Some(json!({"image": junk.display().to_string()}))).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("neither an OCI archive"), "{v}");
}

#[tokio::test]
async fn images_are_pulled_from_a_registry_once() {
    let registry = start_registry();
    let client = orchard_tests::http_client();
    image().push(&client, &registry.addr, "test/busybox", "v1").await;
    let server = Server::start_with(ServerOptions {
        extra_args: vec!["--insecure-registry".into(), registry.addr.clone()],
        ..Default::default()
    })
    .await;
    let reference = format!("{}/test/busybox:v1", registry.addr);
    check(&server, &reference).await;
    // Cached: a second sandbox does not pull again, even with the registry gone.
    drop(registry);
    check(&server, &reference).await;
    // A tag that does not exist is a clear error.
    let (status, v) =
        server.call(reqwest::Method::POST, "/sandboxes", Some(json!({"image": format!("{reference}-nope")}))).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("pull failed"), "{v}");
}
