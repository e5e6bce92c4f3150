// The app's storage account: the host's storage (AzureWebJobsStorage, reached with the
// identity through __blobServiceUri) and the Flex Consumption deployment container. No shared
// key, TLS 1.2, no public blob access. With the Durable Task Scheduler backend the host needs
// blobs only; with durableOnStorage (the Azure Storage backend) the identity also gets the
// queue and table data roles that backend needs.
param name string
param location string
param tags object
param deploymentContainerName string
param identityPrincipalId string
param durableOnStorage bool = false
param vnetEnabled bool = false

// Storage Blob Data Owner: host secrets and leases, the deployment package.
var storageBlobDataOwner = 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
// Storage Queue Data Contributor and Storage Table Data Contributor: Durable on Azure Storage.
var storageQueueDataContributor = '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
var storageTableDataContributor = '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  // checkov:skip=CKV_AZURE_35:the network rule denies by default with vnetEnabled; without a VNet the Flex host reaches its storage over the internet, with Entra ID only (no shared key)
  // checkov:skip=CKV_AZURE_206:locally redundant on purpose: the account holds only the host's leases and keys and the deployment package, all re-created by a deploy
  sku: {
    name: 'Standard_LRS'
  }
  properties: {
    accessTier: 'Hot'
    allowSharedKeyAccess: false
    allowBlobPublicAccess: false
    allowCrossTenantReplication: false
    defaultToOAuthAuthentication: true
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    dnsEndpointType: 'Standard'
    publicNetworkAccess: vnetEnabled ? 'Disabled' : 'Enabled'
    networkAcls: {
      defaultAction: vnetEnabled ? 'Deny' : 'Allow'
      bypass: 'AzureServices'
    }
  }

  resource blobs 'blobServices' = {
    name: 'default'
    properties: {
      deleteRetentionPolicy: {
        enabled: true
        days: 7
      }
    }

    resource deploymentContainer 'containers' = {
      name: deploymentContainerName
      properties: {
        publicAccess: 'None'
      }
    }
  }
}

resource appBlobAccess 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(account.id, identityPrincipalId, storageBlobDataOwner)
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageBlobDataOwner)
    principalId: identityPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource appQueueAccess 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (durableOnStorage) {
  name: guid(account.id, identityPrincipalId, storageQueueDataContributor)
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageQueueDataContributor)
    principalId: identityPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource appTableAccess 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (durableOnStorage) {
  name: guid(account.id, identityPrincipalId, storageTableDataContributor)
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageTableDataContributor)
    principalId: identityPrincipalId
    principalType: 'ServicePrincipal'
  }
}

output id string = account.id
output name string = account.name
